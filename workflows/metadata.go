package workflows

import (
	"errors"
	"fmt"
	"strings"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/supportflow/supportflow"
)

// What the Temporal Web UI shows of a run beyond its search attributes
// (https://docs.temporal.io/develop/go/enriching-ui):
//
//   - its current details, set with workflow.SetCurrentDetails as the run
//     goes and read through the built-in __temporal_workflow_metadata
//     query, which a worker answers (a closed run's by replaying it); and
//   - each activity's summary (ActivityOptions.Summary), written into the
//     ActivityTaskScheduled event's user metadata.
//
// Both pass through the payload codec like any payload, so the Web UI
// shows them through the codec server. Neither is part of the commands the
// SDK's determinism check compares (a scheduled activity is matched by its
// ID and type), and current details are no command at all: adding or
// changing either needs no GetVersion, and committed histories replay
// (TestReplay_CommittedHistories).
//
// They hold IDs, counts and states only: never customer text, reply text,
// names, emails or a service's error text (which may quote any of them).

// detailSep separates the parts of a run's current details.
const detailSep = " · "

// setDetails sets the run's current details from its parts, leaving out
// empty ones.
func setDetails(ctx workflow.Context, parts ...string) {
	kept := parts[:0:0]
	for _, p := range parts {
		if p != "" {
			kept = append(kept, p)
		}
	}
	workflow.SetCurrentDetails(ctx, strings.Join(kept, detailSep))
}

func ticketPart(id int64) string { return fmt.Sprintf("ticket %d", id) }

// plural is "1 subscription", "2 subscriptions".
func plural(n int, noun string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// tokensPart is the model tokens a run's drafts used; "" before any.
func tokensPart(prompt, completion int64) string {
	if prompt == 0 && completion == 0 {
		return ""
	}
	return fmt.Sprintf("model tokens %d prompt + %d completion", prompt, completion)
}

// draftStateWords are a draft's states in words.
var draftStateWords = map[string]string{
	supportflow.DraftGathering:        "gathering",
	supportflow.DraftDrafting:         "drafting",
	supportflow.DraftAwaitingApproval: "awaiting approval",
	supportflow.DraftExecuting:        "executing",
	supportflow.DraftDone:             "done",
	supportflow.DraftRejected:         "rejected",
	supportflow.DraftSuperseded:       "superseded",
	supportflow.DraftExpired:          "expired",
	supportflow.DraftFailed:           "failed",
}

// enrichStateWords are an enrichment run's states in words.
var enrichStateWords = map[string]string{
	supportflow.EnrichWaiting:    "waiting",
	supportflow.EnrichLookingUp:  "looking up the customer",
	supportflow.EnrichEnriched:   "enriched",
	supportflow.EnrichDeadLetter: "dead letter",
}

// stateWords is a state in words: its table's entry, or the state with
// underscores as spaces ("needs_attention": "needs attention").
func stateWords(words map[string]string, state string) string {
	if w, ok := words[state]; ok {
		return w
	}
	return strings.ReplaceAll(state, "_", " ")
}

// zendeskWords names an action's Zendesk leg: "post reply", "post
// private note", "update status and tags", or a note or reply and the
// update.
func zendeskWords(act supportflow.Action) string {
	var what string
	switch {
	case act.Comment != nil && act.Comment.Public:
		what = "post reply"
	case act.Comment != nil:
		what = "post private note"
	}
	switch {
	case act.UpdateTicket == nil:
		return what
	case what == "":
		return "update status and tags"
	}
	return what + " and update status and tags"
}

// cancelWords names an action's cancellation leg: "cancel 2 subscriptions".
func cancelWords(act supportflow.Action) string {
	return "cancel " + plural(len(act.CancelSubscriptions), "subscription")
}

// onTicket is an activity summary: what the call does, and on which ticket.
func onTicket(what string, ticketID int64) string {
	return fmt.Sprintf("%s, ticket %d", what, ticketID)
}

// errorKind classifies an error for a run's details: the application
// error's type ("InvalidModelOutput", "Rejected"), "timeout" or
// "cancelled"; "" for any other. Never its message.
func errorKind(err error) string {
	var (
		app     *temporal.ApplicationError
		timeout *temporal.TimeoutError
	)
	switch {
	case temporal.IsCanceledError(err):
		return "cancelled"
	case errors.As(err, &timeout):
		return "timeout"
	case errors.As(err, &app):
		return app.Type()
	}
	return ""
}
