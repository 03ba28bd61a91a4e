package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/standin"
	"github.com/supportflow/supportflow/starter"
)

// demoTicket is one seeded ticket; subs is how many subscriptions its
// customer has.
type demoTicket struct {
	subject, body, name string
	subs                int
}

var demoTickets = []demoTicket{
	{"Please cancel my subscriptions", "I'd like to cancel both of my plans, please.", "Dana", 2},
	{"Late delivery", "My box has not arrived yet. Where is it?", "Lee", 1},
	{"Charged twice", "I see two charges this month.", "Kim", 0},
}

// demoRun drives the demo tickets through the front door.
type demoRun struct {
	s      *starter.Starter
	st     *stack
	apiURL string
	token  string
	// shownToken is what the printed approve command sends: the token
	// when this run generated it, else $SUPPORTFLOW_TOKEN.
	shownToken string
}

// printProposal prints a draft that awaits approval and how to approve it.
func (d *demoRun) printProposal(ticket int64, p *supportflow.DraftProposal) {
	say("ticket %d: proposal %s awaits approval: %q (cancel %v)", ticket, p.ID, p.Reply, p.CancelSubscriptions)
	say("  approve: curl -s -X POST -H \"Authorization: Bearer %s\" %s/proposals/%s/approve", d.shownToken, d.apiURL, p.ID)
	say("  or:      go run ./cmd/starter approve %d %s   (with the environment above)", ticket, p.ID)
}

// listKept prints the draft of every ticket kept from an earlier run, and
// returns those tickets.
func (d *demoRun) listKept(ctx context.Context) []int64 {
	ids := d.st.zd.TicketIDs()
	if len(ids) == 0 {
		return nil
	}
	say("kept from the last run: %d tickets", len(ids))
	for _, id := range ids {
		qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		st, err := d.s.DraftStatus(qctx, id)
		cancel()
		switch {
		case err != nil:
			say("ticket %d: no draft", id)
		case st.State == supportflow.DraftAwaitingApproval && st.Proposal != nil:
			d.printProposal(id, st.Proposal)
		default:
			say("ticket %d: draft %s", id, strings.ReplaceAll(string(st.State), "_", " "))
		}
	}
	return ids
}

// run seeds the demo tickets on the stand-ins and drives each through the
// front door: a signed Zendesk webhook (mirror + enrichment), then a draft
// requested over the HTTP API, until it awaits approval. It prints how to
// approve each. With once, it approves the first over the API and checks
// that exactly one comment and one cancellation per subscription landed.
// Ticket, requester and subscription IDs come from the clock, so a
// restarted local run never meets an earlier run's.
func (d *demoRun) run(ctx context.Context, once bool) ([]int64, error) {
	base := time.Now().Unix() * 10
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	var ids []int64
	subsOf := map[int64][]string{}
	proposals := map[int64]string{}
	for i, dt := range demoTickets {
		requester := base*10 + int64(i)
		customer := fmt.Sprintf("demo-customer-%d", requester)
		var subs []string
		for n := range dt.subs {
			sub := fmt.Sprintf("demo-sub-%d-%d", requester, n+1)
			subs = append(subs, sub)
			d.st.subs.AddSubscription(sub, customer)
		}
		t := standin.Ticket{ID: base + int64(i), Subject: dt.subject, Description: dt.body, RequesterID: requester, RequesterName: dt.name, Status: "new"}
		d.st.bq.AddCustomer(requester, standin.BQCustomer{CustomerID: customer, Email: strings.ToLower(dt.name) + "@example.test",
			Orders: int64(3 + 4*i), ActiveSubscriptions: subs})
		d.st.zd.AddTicket(t)
		ids = append(ids, t.ID)
		subsOf[t.ID] = subs
		say("ticket %d (%q): created; Zendesk's ticket.created webhook starts its enrichment, which waits for its delay", t.ID, t.Subject)
	}
	for _, id := range ids {
		if err := waitFor(ctx, func() (bool, error) {
			e, err := d.s.EnrichmentStatus(ctx, id)
			if err == nil && e.State == supportflow.EnrichEnriched && !e.Found {
				return false, fmt.Errorf("the lookup found no customer (%+v)", e)
			}
			if err == nil && e.State == supportflow.EnrichDeadLetter {
				return false, fmt.Errorf("the lookup was dead-lettered: %s", e.Error)
			}
			return err == nil && e.State == supportflow.EnrichEnriched, nil
		}); err != nil {
			return ids, fmt.Errorf("demo: ticket %d was not enriched: %w", id, err)
		}
		if err := post(ctx, fmt.Sprintf("%s/tickets/%d/drafts", d.apiURL, id), d.token, nil, nil, http.StatusAccepted); err != nil {
			return ids, fmt.Errorf("demo: draft of ticket %d: %w", id, err)
		}
		say("ticket %d: draft requested (watch it in the console)", id)
	}
	for _, id := range ids {
		var st supportflow.DraftStatus
		if err := waitFor(ctx, func() (bool, error) {
			var err error
			st, err = d.s.DraftStatus(ctx, id)
			if err == nil && supportflow.DraftTerminal(st.State) {
				return false, fmt.Errorf("the draft ended %s: %s", st.State, st.Error)
			}
			return err == nil && st.State == supportflow.DraftAwaitingApproval, nil
		}); err != nil {
			return ids, fmt.Errorf("demo: ticket %d: %w", id, err)
		}
		proposals[id] = st.Proposal.ID
		d.printProposal(id, st.Proposal)
	}
	if !once {
		return ids, nil
	}
	first := ids[0]
	if err := post(ctx, d.apiURL+"/proposals/"+proposals[first]+"/approve", d.token, []byte(`{"approved_by":"local-demo"}`), nil, http.StatusOK); err != nil {
		return ids, fmt.Errorf("demo: approve: %w", err)
	}
	if err := waitFor(ctx, func() (bool, error) {
		st, err := d.s.DraftStatus(ctx, first)
		return err == nil && st.State == supportflow.DraftDone, nil
	}); err != nil {
		return ids, fmt.Errorf("demo: the approved draft of ticket %d did not finish: %w", first, err)
	}
	if n := d.st.zd.CommentCount(first); n != 1 {
		return ids, fmt.Errorf("demo: %d comments on ticket %d, want exactly 1", n, first)
	}
	for _, sub := range subsOf[first] {
		if n := d.st.subs.Cancellations(sub); n != 1 {
			return ids, fmt.Errorf("demo: %s cancelled %d times, want exactly 1", sub, n)
		}
	}
	say("demo draft approved and applied: 1 comment, %d cancellations (ticket %d)", len(subsOf[first]), first)
	return ids, nil
}
