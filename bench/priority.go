package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/policy"
	"github.com/supportflow/supportflow/internal/standin"
)

// PriorityLoad is approve -> reply posted while a scan's drafts saturate
// the Zendesk queue (their ticket reads at priority 3 waiting for the
// queue's rate), beside the same approvals with the queue idle, on the
// same worker under the same limits.
type PriorityLoad struct {
	ScanTickets int `json:"scan_tickets"`
	// DraftsStarted is how many drafts the scans had started when the
	// approvals were done.
	DraftsStarted    int64 `json:"drafts_started"`
	ZendeskPerMinute int   `json:"zendesk_limit_per_minute"`
	// ZendeskActivitiesPerSecond is the Zendesk queue's server-enforced
	// activity rate the worker asks for at that limit.
	ZendeskActivitiesPerSecond float64 `json:"zendesk_activities_per_second"`
	// Idle is the approvals before the scan; Loaded while it saturates
	// the queue. Both one at a time, Gap apart.
	Idle   Latency  `json:"idle"`
	Loaded Latency  `json:"loaded"`
	Gap    Duration `json:"gap"`
	// Where an approval's time went, from its execution's history:
	// StartWait from the workflow's start to its first workflow task
	// starting on the workflows' queue (priority 1 there too), QueueWait
	// from PostReply's scheduling to its start on the Zendesk queue (what
	// priority decides against the waiting reads). Idle* the same with the
	// queues idle.
	StartWait     Latency `json:"start_to_first_workflow_task"`
	QueueWait     Latency `json:"post_reply_zendesk_queue_wait"`
	IdleStartWait Latency `json:"idle_start_to_first_workflow_task"`
	IdleQueueWait Latency `json:"idle_post_reply_zendesk_queue_wait"`
	// Backlog is the Zendesk queue's backlog (Temporal's approximate
	// count, refreshed every few seconds: reads waiting to be handed out)
	// just before each loaded approval: its least and greatest;
	// BacklogAgeMax the oldest waiting read's age at those moments. First
	// come, first served, a write queued behind Backlog reads would wait
	// Backlog / ZendeskActivitiesPerSecond.
	BacklogMin    int64    `json:"zendesk_backlog_min"`
	BacklogMax    int64    `json:"zendesk_backlog_max"`
	BacklogAgeMax Duration `json:"zendesk_backlog_age_max"`
	// Saturated counts the loaded approvals made with at least
	// SaturatedAt reads waiting: enough that first come, first served
	// would have missed the goal.
	Saturated   int `json:"saturated_approvals"`
	SaturatedAt int `json:"saturated_at_backlog"`
	// ZendeskMaxPerMinute is the most requests the stand-in saw in any
	// 60 s window from the scan on; Throttled its 429s.
	ZendeskMaxPerMinute int `json:"zendesk_max_per_minute"`
	Throttled           int `json:"throttled"`
}

// priorityZendeskPerMinute is the Zendesk limit the priority phase runs
// under: the production setting (SUPPORTFLOW_ZENDESK_REQUESTS_PER_MINUTE
// in deploy/kubernetes and docker-compose.yml, Zendesk's Team plan), one
// activity a second on the zendesk queue. The worker's Zendesk
// concurrency is production's too.
const (
	priorityZendeskPerMinute   = 200
	priorityZendeskConcurrency = 8
)

// priorityGoal is how much later than with the queue idle an approved
// reply may be posted while a scan saturates the queue (p95 against p95).
const priorityGoal = 2 * time.Second

// Met reports whether the loaded p95 is within priorityGoal of the idle
// p95.
func (p PriorityLoad) Met() bool {
	return p.Loaded.N > 0 && time.Duration(p.Loaded.P95) <= time.Duration(p.Idle.P95)+priorityGoal
}

// measurePriority seeds tickets that all need a draft and starts a worker
// under production's Zendesk limit (and the scan row's model: four at
// once, 300 ms a call). It times approvals one at a time with the queues
// idle, then starts scans of the tickets as the schedule does (priority 4;
// their drafts run at 3) and, once the drafts' ticket reads fill the
// Zendesk queue, times the same approvals (priority 1) again. The phase
// measures the approvals, not the scan (the scan row does): the scans stop
// when the approvals are done, and the drafts stay where they are when
// the worker stops.
func measurePriority(ctx context.Context, s *stack, tickets, approvals int) (PriorityLoad, error) {
	// The worker's pacing of the zendesk queue (config.ResourceLimit): a
	// tenth under the limit, spread over the minute, an activity making
	// up to three calls.
	rate := 0.9 * priorityZendeskPerMinute / 60 / 3
	res := PriorityLoad{ScanTickets: tickets, ZendeskPerMinute: priorityZendeskPerMinute, ZendeskActivitiesPerSecond: rate,
		// First come, first served, a write queued behind this many reads
		// would wait the goal's 2 s or more.
		SaturatedAt: int(math.Ceil(priorityGoal.Seconds() * rate)),
		// Approvals a token apart, so none waits on the one before it.
		Gap: Duration(max(500*time.Millisecond, time.Duration(float64(time.Second)/rate)+100*time.Millisecond))}
	base := time.Now().UnixNano()%1e9*1000 + 700_000_000_000
	if err := seedScanTickets(ctx, s, base, tickets); err != nil {
		return res, err
	}
	stop, err := startLimitedWorker(s, priorityZendeskPerMinute, fmt.Sprintf("SUPPORTFLOW_ZENDESK_CONCURRENCY=%d", priorityZendeskConcurrency))
	if err != nil {
		return res, err
	}
	defer stop()

	zendeskQueue := policy.ResourceQueue(benchQueue, policy.ResourceZendesk)
	// approve approves n one-reply proposals one at a time, Gap apart, and
	// times each from the approval to the comment at the stand-in; before
	// each, it calls before.
	approve := func(label string, n int, before func() error) (Latency, error) {
		var ds []time.Duration
		began := time.Now()
		for i := range n {
			if i > 0 {
				time.Sleep(time.Duration(res.Gap))
			}
			if before != nil {
				if err := before(); err != nil {
					return Latency{}, err
				}
			}
			ticket := s.zd.AddTicket(standin.Ticket{Subject: "bench", Description: "hi"})
			id := fmt.Sprintf("%s-%d-%d", label, base, i)
			p := supportflow.Proposal{ID: id, Actions: []supportflow.Action{{TicketID: ticket, Comment: &supportflow.Comment{Body: "Done.", Public: true}}}}
			t0 := time.Now()
			if _, err := s.starter.ExecuteProposal(ctx, p, "bench"); err != nil {
				return Latency{}, err
			}
			if _, err := s.starter.WaitExecution(ctx, id); err != nil {
				return Latency{}, err
			}
			cs := s.zd.Comments(ticket)
			if len(cs) != 1 {
				return Latency{}, fmt.Errorf("priority: ticket %d has %d comments after one approval", ticket, len(cs))
			}
			ds = append(ds, cs[0].At.Sub(t0))
		}
		return summarize(ds, 1, time.Since(began)), nil
	}
	if _, err := approve("prio-warm", 3, nil); err != nil { // warm the new worker
		return res, err
	}
	if res.Idle, err = approve("prio-idle", approvals, nil); err != nil {
		return res, err
	}
	if res.IdleStartWait, res.IdleQueueWait, err = waits(ctx, s, "prio-idle", base, approvals, zendeskQueue); err != nil {
		return res, err
	}

	// The scans, as the schedule starts them (priority 4; their drafts
	// run at 3), one after another while they start drafts: a scan starts
	// at most MaxScanLimit, and the next finds the same tickets again
	// while their drafts wait for the queue.
	s.zd.SetRateLimit(priorityZendeskPerMinute, time.Minute) // count the requests from here
	scanCtx, cancelScan := context.WithCancel(ctx)
	defer cancelScan()
	scanned := make(chan error, 1)
	rounds, scanBegan := 0, time.Now()
	go func() {
		for started := 0; started < tickets; rounds++ {
			run, err := s.temporal.ExecuteWorkflow(scanCtx, client.StartWorkflowOptions{ID: fmt.Sprintf("bench-prio-scan-%d-%d", base, rounds), TaskQueue: benchQueue,
				Priority: temporal.Priority{PriorityKey: supportflow.PriorityBackground}},
				supportflow.ScanTicketsWorkflow, supportflow.ScanRequest{Limit: supportflow.MaxScanLimit})
			if err != nil {
				scanned <- err
				return
			}
			var sr supportflow.ScanResult
			if err := run.Get(scanCtx, &sr); err != nil {
				scanned <- err
				return
			}
			started += len(sr.Started)
			if len(sr.Started) == 0 {
				break
			}
		}
		scanned <- nil
	}()

	// Approve once the drafts' reads fill the queue: a minute of them (at
	// most half the tickets), or after two minutes whatever there is.
	fill := int64(min(int(60*rate), tickets/2))
	deadline := time.Now().Add(2 * time.Minute)
	for {
		n, _, err := backlog(ctx, s, zendeskQueue)
		if err != nil {
			return res, err
		}
		if n >= fill {
			break
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(s.log, "bench: the Zendesk queue's backlog reached only %d reads; approving anyway\n", n)
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	var backlogs []int64
	if res.Loaded, err = approve("prio-loaded", approvals, func() error {
		n, age, err := backlog(ctx, s, zendeskQueue)
		if err != nil {
			return err
		}
		backlogs = append(backlogs, n)
		res.BacklogAgeMax = max(res.BacklogAgeMax, Duration(age))
		if n >= int64(res.SaturatedAt) {
			res.Saturated++
		}
		return nil
	}); err != nil {
		return res, err
	}
	res.BacklogMin, res.BacklogMax = slices.Min(backlogs), slices.Max(backlogs)
	zd := s.zd.Load()
	res.ZendeskMaxPerMinute, res.Throttled = zd.MaxInWindow, zd.Throttled
	drafts, err := s.temporal.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: s.namespace,
		Query: fmt.Sprintf("WorkflowType = '%s' AND StartTime >= '%s'", supportflow.DraftReplyWorkflow, scanBegan.UTC().Format(time.RFC3339Nano))})
	if err != nil {
		return res, err
	}
	res.DraftsStarted = drafts.GetCount()
	if res.StartWait, res.QueueWait, err = waits(ctx, s, "prio-loaded", base, approvals, zendeskQueue); err != nil {
		return res, err
	}
	// The scans stop here, so that nothing runs on after the phase.
	select {
	case err := <-scanned:
		if err != nil {
			return res, err
		}
	default:
		cancelScan()
		<-scanned
		for round := 0; round <= rounds; round++ {
			_ = s.temporal.TerminateWorkflow(ctx, fmt.Sprintf("bench-prio-scan-%d-%d", base, round), "", "bench: the priority phase is over")
		}
	}
	return res, nil
}

// waits reads the histories of the executions label-base-0..n-1 and
// summarizes how long each waited for its first workflow task and for
// its Zendesk activity to start.
func waits(ctx context.Context, s *stack, label string, base int64, n int, zendeskQueue string) (start, queue Latency, err error) {
	var starts, queued []time.Duration
	for i := range n {
		id := supportflow.ExecuteWorkflowID(fmt.Sprintf("%s-%d-%d", label, base, i))
		var began, firstTask time.Time
		scheduled := map[int64]time.Time{}
		it := s.temporal.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			e, err := it.Next()
			if err != nil {
				return start, queue, err
			}
			at := e.GetEventTime().AsTime()
			switch e.GetEventType() {
			case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
				began = at
			case enumspb.EVENT_TYPE_WORKFLOW_TASK_STARTED:
				if firstTask.IsZero() {
					firstTask = at
					starts = append(starts, firstTask.Sub(began))
				}
			case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
				if e.GetActivityTaskScheduledEventAttributes().GetTaskQueue().GetName() == zendeskQueue {
					scheduled[e.GetEventId()] = at
				}
			case enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED:
				if t, ok := scheduled[e.GetActivityTaskStartedEventAttributes().GetScheduledEventId()]; ok {
					queued = append(queued, at.Sub(t))
				}
			}
		}
	}
	return summarize(starts, 1, 0), summarize(queued, 1, 0), nil
}

// backlog is a task queue's approximate activity backlog and the age of
// its oldest task.
func backlog(ctx context.Context, s *stack, queue string) (int64, time.Duration, error) {
	d, err := s.temporal.WorkflowService().DescribeTaskQueue(ctx, &workflowservice.DescribeTaskQueueRequest{
		Namespace:     s.namespace,
		TaskQueue:     &taskqueuepb.TaskQueue{Name: queue, Kind: enumspb.TASK_QUEUE_KIND_NORMAL},
		TaskQueueType: enumspb.TASK_QUEUE_TYPE_ACTIVITY,
		ReportStats:   true,
	})
	if err != nil {
		return 0, 0, fmt.Errorf("describing task queue %s: %w", queue, err)
	}
	st := d.GetStats()
	return st.GetApproximateBacklogCount(), st.GetApproximateBacklogAge().AsDuration(), nil
}
