package workflows

import (
	"fmt"

	"go.temporal.io/sdk/workflow"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/policy"
)

// DefaultEvaluationConcurrency is the drafts an evaluation keeps in flight
// when the request does not say.
const DefaultEvaluationConcurrency = 4

// EvaluateDrafts drafts each ticket of a named set as it stood before the
// agent's newest reply, with at most Concurrency drafts in flight, scores
// each draft against that reply (package eval: word-overlap F1), stores
// every ticket's result and the run's summary in PostgreSQL, and reports
// progress through EvaluationQuery. A ticket that cannot be drafted is
// stored with its error and counted as failed; the run goes on.
func (w *Workflows) EvaluateDrafts(ctx workflow.Context, req supportflow.EvaluationRequest) (supportflow.EvaluationStatus, error) {
	st := supportflow.EvaluationStatus{RunID: req.RunID, Set: req.Set, Total: len(req.TicketIDs)}
	if err := workflow.SetQueryHandler(ctx, supportflow.EvaluationQuery, func() (supportflow.EvaluationStatus, error) {
		return st, nil
	}); err != nil {
		return st, err
	}
	if err := req.Validate(); err != nil {
		setDetails(ctx, "invalid input")
		return st, policy.AppError(err.Error(), supportflow.ErrTypeInvalidInput, err)
	}
	d := w.durations()
	var prompt, completion int64
	// describe sets the run's current details, which the Web UI shows:
	// "evaluation run-1 of set s · 3 of 10 tickets done · 1 failed ·
	// model tokens … · running".
	describe := func(state string) {
		var failed, mean string
		if st.Failed > 0 {
			failed = fmt.Sprintf("%d failed", st.Failed)
		}
		if st.Done > st.Failed {
			mean = fmt.Sprintf("mean score %.3f", st.MeanScore)
		}
		setDetails(ctx, fmt.Sprintf("evaluation %s of set %s", req.RunID, req.Set), fmt.Sprintf("%d of %d tickets done", st.Done, st.Total),
			failed, mean, tokensPart(prompt, completion), state)
	}
	describe("running")
	limit := req.Concurrency
	if limit == 0 {
		limit = DefaultEvaluationConcurrency
	}
	var (
		inFlight int
		sum      float64
		drafted  int
	)
	wg := workflow.NewWaitGroup(ctx)
	for _, ticket := range req.TicketIDs {
		if err := workflow.Await(ctx, func() bool { return inFlight < limit }); err != nil {
			return st, err
		}
		inFlight++
		wg.Add(1)
		workflow.Go(ctx, func(ctx workflow.Context) {
			defer wg.Done()
			score, p, ok := w.evaluateOne(ctx, d, req.RunID, ticket)
			inFlight--
			st.Done++
			prompt, completion = prompt+p.PromptTokens, completion+p.CompletionTokens
			defer describe("running")
			if !ok {
				st.Failed++
				return
			}
			drafted++
			sum += score
			st.MeanScore = sum / float64(drafted)
		})
	}
	wg.Wait(ctx)
	describe("recording the summary")
	sctx := w.activityOptions(ctx, policy.KindLedger, d.Lease, false, "record evaluation summary, "+plural(st.Total, "ticket"))
	if err := call(sctx, supportflow.RecordEvalSummary, st).Get(ctx, nil); err != nil {
		return st, err
	}
	st.Finished = true
	describe("done")
	return st, nil
}

// evaluateOne drafts and scores one ticket; ok is false when it could not
// be drafted (its error is stored with the result). p is the draft (its
// token usage counted whether or not the result was stored).
func (w *Workflows) evaluateOne(ctx workflow.Context, d policy.Durations, runID string, ticket int64) (score float64, p supportflow.DraftProposal, ok bool) {
	in := supportflow.EvalResultInput{RunID: runID, TicketID: ticket}
	var tc supportflow.TicketContext
	lctx := w.activityOptions(ctx, policy.KindZendeskRead, LoadTicketDeadline(d), true, fmt.Sprintf("load ticket %d for evaluation", ticket))
	err := call(lctx, supportflow.LoadTicket, supportflow.LoadTicketInput{TicketID: ticket, ForEvaluation: true}).Get(ctx, &tc)
	if err == nil {
		in.ActualReply = tc.ActualReply
		gctx := w.activityOptions(ctx, policy.KindModel, d.ModelAttemptTimeout, true, onTicket("model draft for evaluation", ticket))
		gen := supportflow.GenerateInput{ProposalID: fmt.Sprintf("eval-%d", ticket), Ticket: tc}
		err = call(gctx, supportflow.GenerateDraft, gen).Get(ctx, &p)
		in.Draft = p.Reply
	}
	if err != nil {
		in.Error = errorMessage(err)
	}
	rctx := w.activityOptions(ctx, policy.KindLedger, d.Lease, false, onTicket("record evaluation result", ticket))
	if rerr := call(rctx, supportflow.RecordEvalResult, in).Get(ctx, &score); rerr != nil {
		workflow.GetLogger(ctx).Error("recording an evaluation result failed", "ticket_id", ticket, "error_type", policy.ErrorClass(rerr))
		return 0, p, false
	}
	return score, p, err == nil
}
