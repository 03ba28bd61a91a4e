package tests

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/ingest"
	"github.com/supportflow/supportflow/internal/standin"
)

// A scan has filled the Zendesk queue with its drafts' ticket reads, and a
// person approves a reply: the reply's Zendesk write (priority 1) is handed
// to the next free worker slot, ahead of the scanned drafts' reads
// (priority 3) that were queued before it. Two worker processes, one
// Zendesk activity at a time each; the first two reads are held at the
// stand-in until the reply's write is queued behind the rest, so the
// order the queue hands them out is all that decides who goes next. First
// come, first served would post the reply after every read.
func TestPriority_ApprovedReplyOvertakesAScan(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.extraEnv = append(s.extraEnv,
		"SUPPORTFLOW_ZENDESK_CONCURRENCY=1",
		// Long enough for a read held at the stand-in to finish (and a
		// claim's lease outlives a call).
		"SUPPORTFLOW_ZENDESK_CALL_TIMEOUT=45s", "SUPPORTFLOW_LEASE=60s")
	ctx := ctxT(t)
	now := time.Now().UTC().Truncate(time.Second)
	const drafts = 16
	scanned := map[string]bool{}
	var draftIDs []string
	for range drafts {
		id := s.seedTicket("Hello?")
		scanned[fmt.Sprint(id)] = true
		draftIDs = append(draftIDs, supportflow.DraftWorkflowID(id))
		require.NoError(t, s.enrichment.PutEnrichment(ctx, id, standin.DefaultRequesterID, supportflow.Enrichment{CustomerID: "c"}))
		_, err := s.mirror.UpsertTicketMirror(ctx, ingest.TicketMirror{TicketID: id, Status: "open", UpdatedAt: now, LastCustomerCommentAt: now})
		require.NoError(t, err)
	}
	answer := s.zd.AddTicket(standin.Ticket{Subject: "Where is my refund?"})
	s.own(answer, "cust-1")

	// The Zendesk requests in the order they arrive; the scanned tickets'
	// reads are held until release is closed.
	var (
		mu      sync.Mutex
		order   []string
		held    = make(chan struct{}, drafts)
		release = make(chan struct{})
	)
	isScanned := func(r *http.Request) bool {
		parts := strings.Split(strings.TrimSuffix(r.URL.Path, ".json"), "/")
		return r.Method == http.MethodGet && len(parts) >= 5 && parts[3] == "tickets" && scanned[parts[4]]
	}
	intercept := func(w http.ResponseWriter, r *http.Request) bool {
		if isScanned(r) {
			select {
			case held <- struct{}{}:
			default:
			}
			<-release
			mu.Lock()
			order = append(order, "read "+strings.Split(strings.TrimSuffix(r.URL.Path, ".json"), "/")[4])
			mu.Unlock()
			return false
		}
		if strings.Contains(r.URL.Path, fmt.Sprintf("/tickets/%d", answer)) {
			// The reply's first request (its stamp read, then the write).
			mu.Lock()
			order = append(order, "reply")
			mu.Unlock()
		}
		return false
	}
	s.zdGate.intercept.Store(&intercept)
	s.startWorker()
	s.startExtraWorker()

	// The scan, as its schedule starts it; its drafts run at priority 3.
	_, err := s.temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "scan-priority-" + runNonce, TaskQueue: s.taskQueue,
		Priority: temporal.Priority{PriorityKey: supportflow.PriorityBackground}}, supportflow.ScanTicketsWorkflow, supportflow.ScanRequest{})
	require.NoError(t, err)
	// Both workers' one Zendesk slot is taken by a held read; the other
	// drafts' reads wait in the queue.
	for range 2 {
		select {
		case <-held:
		case <-time.After(waitBudget):
			d, err := s.temporal.DescribeWorkflowExecution(context.Background(), "scan-priority-"+runNonce, "")
			t.Logf("scan: %v %v", d, err)
			d, err = s.temporal.DescribeWorkflowExecution(context.Background(), draftIDs[0], "")
			t.Logf("draft: %v %v", d, err)
			t.Fatal("the scanned drafts' reads never arrived")
		}
	}
	waitScheduled(t, s, draftIDs, "LoadTicket", drafts-2)

	s.approve(supportflow.Proposal{ID: "priority-" + runNonce, Actions: []supportflow.Action{reply(answer, "Your refund is on its way.")}})
	waitScheduled(t, s, []string{supportflow.ExecuteWorkflowID("priority-" + runNonce)}, "PostReply", 1)
	// Scheduled in the history, the task reaches the queue's backlog a
	// moment later (a transfer task).
	time.Sleep(time.Second)
	close(release)

	statuses, err := s.wait("priority-" + runNonce)
	require.NoError(t, err)
	assert.Equal(t, supportflow.StateApplied, statuses[0].State)
	// The tickets in the order of their first read, the reply among them.
	firstReads := func() []string {
		seen := map[string]bool{}
		var out []string
		for _, e := range order {
			if !seen[e] {
				seen[e] = true
				out = append(out, e)
			}
		}
		return out
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(firstReads()) >= drafts+1
	}, waitBudget, 50*time.Millisecond, "every scanned draft read its ticket")
	mu.Lock()
	defer mu.Unlock()
	seq := firstReads()
	at := indexOf(seq, "reply")
	require.GreaterOrEqual(t, at, 0, "the reply was posted")
	t.Logf("Zendesk, each ticket's first request after the release: %v", seq)
	// The two held reads go first, and the other worker may get through a
	// read or two while the reply's attempt does its ledger work before its
	// first Zendesk request; first come, first served would leave no read
	// after the reply.
	assert.GreaterOrEqual(t, len(seq)-1-at, drafts-6,
		"the reply went before the scan's queued reads")
	assert.Equal(t, 1, s.zd.CommentCount(answer), "exactly one comment")
}

// waitScheduled waits until at least n of the workflows have an activity
// of the type scheduled and not yet started: it waits in its queue.
func waitScheduled(t *testing.T, s *stack, workflowIDs []string, activityType string, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		queued := 0
		for _, id := range workflowIDs {
			d, err := s.temporal.DescribeWorkflowExecution(context.Background(), id, "")
			if err != nil {
				continue
			}
			for _, a := range d.GetPendingActivities() {
				if a.GetState() == enumspb.PENDING_ACTIVITY_STATE_SCHEDULED && a.GetActivityType().GetName() == activityType {
					queued++
				}
			}
		}
		return queued >= n
	}, waitBudget, 200*time.Millisecond, "%d %s activities queued", n, activityType)
}

func indexOf(xs []string, x string) int {
	for i, v := range xs {
		if v == x {
			return i
		}
	}
	return -1
}

func countOf(xs []string, x string) int {
	n := 0
	for _, v := range xs {
		if v == x {
			n++
		}
	}
	return n
}
