package tests

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/ingest"
	"github.com/supportflow/supportflow/internal/standin"
)

// nextSecond waits for the next whole second: Zendesk's updated_at (and
// so a webhook comment's time) is whole seconds, so two comments a test
// orders must be a second apart.
func nextSecond() { time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second))) }

// waitMirror polls a ticket's mirror until cond holds and returns it.
func (s *stack) waitMirror(ticket int64, what string, cond func(ingest.TicketMirror) bool) ingest.TicketMirror {
	s.t.Helper()
	deadline := time.Now().Add(waitBudget)
	var m ingest.TicketMirror
	var err error
	for time.Now().Before(deadline) {
		if m, err = s.mirror.GetTicketMirror(context.Background(), ticket); err == nil && cond(m) {
			return m
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.t.Fatalf("ticket %d: never %s; last mirror: status %q, customer %s, agent %s (%v)", ticket, what,
		m.Status, m.LastCustomerCommentAt, m.LastAgentCommentAt, err)
	return m
}

// candidates is the scan's list of tickets needing a draft (no grace for
// enrichment).
func (s *stack) candidates() []int64 {
	s.t.Helper()
	ids, err := s.proposalStore.DraftCandidates(context.Background(), supportflow.MaxScanLimit, 0)
	require.NoError(s.t, err)
	return ids
}

// A public comment by an end user who is not the requester (a colleague
// the customer CC'd) after an agent's reply is the customer speaking: the
// mirror says the customer spoke last, the event is customer activity, a
// scan drafts the ticket, and the colleague writing again supersedes the
// draft. A messaging follow-up that reaches the webhook only as
// messaging_ticket.message_added counts the same way; a bot's message
// counts for no one.
func TestIngestion_EndUserWhoIsNotTheRequesterIsACustomer(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.extraEnv = []string{"SUPPORTFLOW_ENRICH_NEW_TICKET_DELAY=100ms", "SUPPORTFLOW_ENRICH_UPDATE_DELAY=100ms"}
	s.startWorker()
	c := s.api()
	c.subscribe(standin.WebhookConfig{})

	base := 64000 + ticketIDs.Add(10)
	requester, colleague, agent := base*10+1, base*10+2, base*10+3
	s.zd.AddUser(standin.User{ID: colleague, Name: "Colleague"})
	s.zd.AddUser(standin.User{ID: agent, Name: "Human Agent", Role: standin.RoleAgent})
	s.bq.AddCustomer(requester, standin.BQCustomer{CustomerID: "c-cc"})
	tk := standin.Ticket{ID: base + 1, Subject: "Refund", Description: "Please refund my last order.", RequesterID: requester, Status: "open"}
	chat := standin.Ticket{ID: base + 2, Subject: "Chat", Description: "Where is my parcel?", RequesterID: requester, Status: "open"}
	s.zd.AddTicket(tk)
	s.zd.AddTicket(chat)
	s.waitMirror(tk.ID, "the requester spoke", func(m ingest.TicketMirror) bool { return !m.LastCustomerCommentAt.IsZero() })
	s.waitMirror(chat.ID, "the requester spoke", func(m ingest.TicketMirror) bool { return !m.LastCustomerCommentAt.IsZero() })

	// A human agent answers both (is_staff true): agent spoke last.
	nextSecond()
	s.zd.AddComment(tk.ID, standin.SeedComment{Body: "Looking into it.", AuthorID: agent})
	s.zd.AddComment(chat.ID, standin.SeedComment{Body: "Checking with the carrier.", AuthorID: agent})
	for _, id := range []int64{tk.ID, chat.ID} {
		s.waitMirror(id, "the agent spoke last", func(m ingest.TicketMirror) bool { return m.LastAgentCommentAt.After(m.LastCustomerCommentAt) })
	}
	assert.NotContains(t, s.candidates(), tk.ID, "no draft while the agent spoke last")

	// The customer copies a colleague, who writes (is_staff false, not
	// the requester): the customer is waiting.
	s.zd.AddCCs(tk.ID, colleague)
	nextSecond()
	s.zd.AddComment(tk.ID, standin.SeedComment{Body: "Any update on this refund?", AuthorID: colleague})
	m := s.waitMirror(tk.ID, "the colleague spoke last", func(m ingest.TicketMirror) bool {
		return m.LastCustomerCommentAt.After(m.LastAgentCommentAt)
	})
	assert.Equal(t, requester, m.RequesterID, "the requester is unchanged")
	require.Eventually(t, func() bool {
		return s.count(`SELECT count(*) FROM ticket_event WHERE ticket_id = $1 AND event_type = $2 AND customer_activity AND actor_id = $3`,
			tk.ID, ingest.TypeTicketCommentAdded, colleague) == 1
	}, waitBudget, 20*time.Millisecond, "the colleague's comment was recorded as customer activity")
	assert.Zero(t, s.count(`SELECT count(*) FROM ticket_event WHERE ticket_id = $1 AND customer_activity AND actor_id = $2`, tk.ID, agent),
		"the agent's comment is not customer activity")

	// A messaging follow-up by the customer reaches the webhook only as
	// messaging_ticket.message_added; a bot's message after it counts for
	// no one.
	nextSecond()
	s.zd.AddMessage(chat.ID, standin.Message{Body: "Hello? Still no parcel."})
	m = s.waitMirror(chat.ID, "the messaging customer spoke last", func(m ingest.TicketMirror) bool {
		return m.LastCustomerCommentAt.After(m.LastAgentCommentAt)
	})
	assert.Equal(t, "open", m.Status, "a messaging event leaves the ticket's fields alone")
	nextSecond()
	s.zd.AddMessage(chat.ID, standin.Message{Body: "An agent will be with you shortly.", ActorType: standin.MessagingSystem})
	waitCtx, cancel := context.WithTimeout(context.Background(), waitBudget)
	defer cancel()
	require.NoError(t, s.zd.WaitWebhooks(waitCtx))
	assert.Equal(t, 1, s.count(`SELECT count(*) FROM ticket_event WHERE ticket_id = $1 AND event_type = $2 AND customer_activity`,
		chat.ID, ingest.TypeMessageAdded), "the customer's message is customer activity")
	assert.Equal(t, 1, s.count(`SELECT count(*) FROM ticket_event WHERE ticket_id = $1 AND event_type = $2 AND NOT mirrored AND NOT customer_activity`,
		chat.ID, ingest.TypeMessageAdded), "the bot's message is recorded and changes nothing")
	after, err := s.mirror.GetTicketMirror(ctxT(t), chat.ID)
	require.NoError(t, err)
	assert.Equal(t, m.LastCustomerCommentAt, after.LastCustomerCommentAt)
	assert.Equal(t, m.LastAgentCommentAt, after.LastAgentCommentAt, "the bot did not answer for the agents")
	st := s.zd.WebhookStats()
	assert.Equal(t, st.Attempts, st.ByStatus[http.StatusOK], "every delivery was accepted: %+v", st)

	// Both tickets are candidates; once enriched, a scan drafts them.
	cands := s.candidates()
	assert.Contains(t, cands, tk.ID)
	assert.Contains(t, cands, chat.ID)
	require.Eventually(t, func() bool {
		return s.count(`SELECT count(*) FROM ticket_enrichment WHERE ticket_id = ANY($1)`, []int64{tk.ID, chat.ID}) == 2
	}, waitBudget, 50*time.Millisecond, "both tickets were looked up")
	run, err := s.temporal.ExecuteWorkflow(ctxT(t), clientStart("scan-"+t.Name()+"-"+runNonce, s.taskQueue),
		supportflow.ScanTicketsWorkflow, supportflow.ScanRequest{Limit: supportflow.MaxScanLimit})
	require.NoError(t, err)
	var res supportflow.ScanResult
	scanCtx, cancelScan := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancelScan()
	require.NoError(t, run.Get(scanCtx, &res))
	first := s.waitState(tk.ID, supportflow.DraftAwaitingApproval)
	s.waitState(chat.ID, supportflow.DraftAwaitingApproval)
	require.NotNil(t, first.Proposal)

	// The colleague writes again: news from the customer supersedes the
	// running draft, which drafts anew.
	nextSecond()
	s.zd.AddComment(tk.ID, standin.SeedComment{Body: "Adding the order number: 1234.", AuthorID: colleague})
	s.waitDraft(tk.ID, "redrafted", func(st supportflow.DraftStatus) bool {
		return st.Proposal != nil && st.Proposal.ID != first.Proposal.ID
	})
	assert.Equal(t, 2, s.count(`SELECT count(*) FROM ticket_event WHERE ticket_id = $1 AND customer_activity AND actor_id = $2`, tk.ID, colleague))
}

// Two status changes of one ticket in one second (Zendesk's updated_at is
// whole seconds), delivered newest first because the older delivery is
// held back: the mirror keeps the newer status, ordered by the envelope's
// sub-second time, so one ticket stays a draft candidate (pending, then
// open by a trigger, actor_id "-1") and the other drops out (open, then
// solved).
func TestIngestion_SameSecondOlderDeliveryLoses(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	c := s.api()
	c.subscribe(standin.WebhookConfig{})

	base := 65000 + ticketIDs.Add(10)
	agent := base*10 + 9
	s.zd.AddUser(standin.User{ID: agent, Name: "Human Agent", Role: standin.RoleAgent})
	stays := standin.Ticket{ID: base + 1, Subject: "Stays", Description: "Help, please.", RequesterID: base*10 + 1, Status: "open"}
	drops := standin.Ticket{ID: base + 2, Subject: "Drops", Description: "Help, please.", RequesterID: base*10 + 2, Status: "pending"}
	for _, tk := range []standin.Ticket{stays, drops} {
		s.zd.AddTicket(tk)
		s.waitMirrored(tk.ID)
	}
	cands := s.candidates()
	require.Contains(t, cands, stays.ID)
	require.NotContains(t, cands, drops.ID, "pending: not a candidate yet")

	// The two older changes are held back 2 s, so each ticket's newer
	// change of the same second is delivered first.
	s.zd.InjectWebhookFault(standin.WebhookFault{Type: "status_changed", Delay: 2 * time.Second, Times: 2})
	nextSecond()
	sec := time.Now().Truncate(time.Second)
	s.zd.ChangeStatus(stays.ID, standin.StatusChange{Status: "pending", ActorID: agent, At: sec.Add(100 * time.Millisecond)})
	s.zd.ChangeStatus(drops.ID, standin.StatusChange{Status: "open", ActorID: agent, At: sec.Add(150 * time.Millisecond)})
	s.zd.ChangeStatus(stays.ID, standin.StatusChange{Status: "open", ActorID: standin.SystemActorID, At: sec.Add(400 * time.Millisecond)})
	s.zd.ChangeStatus(drops.ID, standin.StatusChange{Status: "solved", ActorID: agent, At: sec.Add(450 * time.Millisecond)})
	waitCtx, cancel := context.WithTimeout(context.Background(), waitBudget)
	defer cancel()
	require.NoError(t, s.zd.WaitWebhooks(waitCtx))
	st := s.zd.WebhookStats()
	require.Zero(t, st.Lost, "%+v", st)
	assert.Equal(t, st.Attempts, st.ByStatus[http.StatusOK], "every delivery, the system actor's included, was accepted: %+v", st)

	for _, tc := range []struct {
		ticket    int64
		want      string
		candidate bool
	}{{stays.ID, "open", true}, {drops.ID, "solved", false}} {
		// Both events were recorded, the older one received last.
		type ev struct {
			At, Received time.Time
			Mirrored     bool
		}
		rows, err := s.pool.Query(ctxT(t), `SELECT occurred_at, received_at, mirrored FROM ticket_event
WHERE ticket_id = $1 AND event_type = $2 ORDER BY occurred_at`, tc.ticket, ingest.TypeTicketStatusChanged)
		require.NoError(t, err)
		var evs []ev
		for rows.Next() {
			var e ev
			require.NoError(t, rows.Scan(&e.At, &e.Received, &e.Mirrored))
			evs = append(evs, e)
		}
		require.NoError(t, rows.Err())
		require.Len(t, evs, 2, "ticket %d: both changes recorded", tc.ticket)
		assert.Equal(t, evs[0].At.Unix(), evs[1].At.Unix(), "one second")
		assert.True(t, evs[0].Received.After(evs[1].Received), "ticket %d: the older change arrived last", tc.ticket)
		assert.False(t, evs[0].Mirrored, "ticket %d: the late older delivery changed nothing", tc.ticket)
		assert.True(t, evs[1].Mirrored)

		m, err := s.mirror.GetTicketMirror(ctxT(t), tc.ticket)
		require.NoError(t, err)
		zt, _ := s.zd.Ticket(tc.ticket)
		assert.Equal(t, tc.want, m.Status, "ticket %d keeps the newer status", tc.ticket)
		assert.Equal(t, zt.Status, m.Status, "ticket %d: as Zendesk has it", tc.ticket)
		assert.Equal(t, tc.candidate, slices.Contains(s.candidates(), tc.ticket),
			fmt.Sprintf("ticket %d is a draft candidate as its newer status says", tc.ticket))
	}
}
