package main

import (
	"context"
	"fmt"
	"os"
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
	ScanTickets      int `json:"scan_tickets"`
	ZendeskPerMinute int `json:"zendesk_limit_per_minute"`
	// ZendeskActivitiesPerSecond is the Zendesk queue's server-enforced
	// activity rate the worker asks for at that limit.
	ZendeskActivitiesPerSecond float64 `json:"zendesk_activities_per_second"`
	// Idle is the approvals before the scan; Loaded while it saturates
	// the queue. Both one at a time.
	Idle   Latency `json:"idle"`
	Loaded Latency `json:"loaded"`
	// Backlog is the Zendesk queue's backlog (Temporal's approximate
	// count, tasks waiting to be handed out) just before each loaded
	// approval: its least and greatest; BacklogAgeMax the oldest waiting
	// task's age at those moments. First come, first served, a write
	// queued behind Backlog reads would wait Backlog / the queue's rate.
	BacklogMin    int64    `json:"zendesk_backlog_min"`
	BacklogMax    int64    `json:"zendesk_backlog_max"`
	BacklogAgeMax Duration `json:"zendesk_backlog_age_max"`
	// Where a loaded approval's time went, from its execution's history:
	// StartWait from the workflow's start to its first workflow task
	// starting on the workflows' queue (priority 1 there too), QueueWait
	// from PostReply's scheduling to its start on the Zendesk queue (what
	// priority decides against the waiting reads). Idle* the same with the
	// queues idle.
	StartWait     Latency `json:"start_to_first_workflow_task"`
	QueueWait     Latency `json:"post_reply_zendesk_queue_wait"`
	IdleStartWait Latency `json:"idle_start_to_first_workflow_task"`
	IdleQueueWait Latency `json:"idle_post_reply_zendesk_queue_wait"`
	// Saturated counts the loaded approvals made with at least
	// SaturatedAt reads waiting in the queue.
	Saturated   int `json:"saturated_approvals"`
	SaturatedAt int `json:"saturated_at_backlog"`
	// ZendeskMaxPerMinute is the most requests the stand-in saw in any
	// 60 s window of the phase; Throttled its 429s.
	ZendeskMaxPerMinute int `json:"zendesk_max_per_minute"`
	Throttled           int `json:"throttled"`
}

// priorityGoal is how much later than with the queue idle an approved
// reply may be posted while a scan saturates the queue (p95 against p95).
const priorityGoal = 2 * time.Second

// Met reports whether the loaded p95 is within priorityGoal of the idle
// p95.
func (p PriorityLoad) Met() bool {
	return p.Loaded.N > 0 && time.Duration(p.Loaded.P95) <= time.Duration(p.Idle.P95)+priorityGoal
}

// measurePriority seeds tickets that all need a draft, starts a worker
// under the scan's limits (Zendesk 3,000 a minute, the model four at once
// at 300 ms a call), times approvals one at a time with the queues idle,
// then starts scans of the tickets as the schedule does (priority 4; their
// drafts run at 3) and, once the drafts' ticket reads are waiting in the
// Zendesk queue, times the same approvals (priority 1) again. The drafts
// are left where they are when the worker stops: the phase measures the
// approvals, not the scan (the scan row does).
func measurePriority(ctx context.Context, s *stack, tickets, approvals int) (PriorityLoad, error) {
	res := PriorityLoad{ScanTickets: tickets, ZendeskPerMinute: scanZendeskPerMinute,
		// The worker's pacing of the zendesk queue (config.ResourceLimit):
		// a tenth under the limit, spread over the minute, an activity
		// making up to three calls.
		ZendeskActivitiesPerSecond: 0.9 * scanZendeskPerMinute / 60 / 3,
		// A second's worth of reads waiting: first come, first served, a
		// write queued now would wait at least a second.
		SaturatedAt: 15}
	base := time.Now().UnixNano()%1e9*1000 + 700_000_000_000
	if err := seedScanTickets(ctx, s, base, tickets); err != nil {
		return res, err
	}
	stopLimits, err := startLimitedWorker(s)
	if err != nil {
		return res, err
	}
	defer stopLimits()

	zendeskQueue := policy.ResourceQueue(benchQueue, policy.ResourceZendesk)
	one := func(label string, i int) (time.Duration, error) {
		ticket := s.zd.AddTicket(standin.Ticket{Subject: "bench", Description: "hi"})
		id := fmt.Sprintf("%s-%d-%d", label, base, i)
		p := supportflow.Proposal{ID: id, Actions: []supportflow.Action{{TicketID: ticket, Comment: &supportflow.Comment{Body: "Done.", Public: true}}}}
		t0 := time.Now()
		if _, err := s.starter.ExecuteProposal(ctx, p, "bench"); err != nil {
			return 0, err
		}
		if _, err := s.starter.WaitExecution(ctx, id); err != nil {
			return 0, err
		}
		cs := s.zd.Comments(ticket)
		if len(cs) != 1 {
			return 0, fmt.Errorf("priority: ticket %d has %d comments after one approval", ticket, len(cs))
		}
		return cs[0].At.Sub(t0), nil
	}
	for i := range 3 { // warm the new worker
		if _, err := one("prio-warm", i); err != nil {
			return res, err
		}
	}
	began := time.Now()
	var idle []time.Duration
	for i := range approvals {
		d, err := one("prio-idle", i)
		if err != nil {
			return res, err
		}
		idle = append(idle, d)
	}
	res.Idle = summarize(idle, 1, time.Since(began))
	if res.IdleStartWait, res.IdleQueueWait, err = waits(ctx, s, "prio-idle", base, approvals, zendeskQueue); err != nil {
		return res, err
	}

	// The scans, as the schedule starts them (priority 4; their drafts
	// run at 3), one after another until every ticket's draft has started
	// (a scan starts at most MaxScanLimit, and finds again the tickets
	// whose drafts are still running) or the approvals are done.
	s.zd.SetRateLimit(scanZendeskPerMinute, time.Minute) // count the phase's requests from here
	scanCtx, cancelScan := context.WithCancel(ctx)
	defer cancelScan()
	scanned := make(chan error, 1)
	rounds := 0
	go func() {
		started := 0
		for ; started < tickets; rounds++ {
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
				select {
				case <-scanCtx.Done():
				case <-time.After(time.Second):
				}
			}
		}
		scanned <- nil
	}()

	// Wait for the drafts' reads to fill the queue (at most the time the
	// queue takes to read every ticket).
	deadline := time.Now().Add(min(2*time.Minute, time.Duration(float64(tickets)/res.ZendeskActivitiesPerSecond*float64(time.Second))))
	for {
		n, _, err := backlog(ctx, s, zendeskQueue)
		if err != nil {
			return res, err
		}
		if os.Getenv("BENCH_DEBUG") != "" {
			d, _ := s.temporal.WorkflowService().DescribeTaskQueue(ctx, &workflowservice.DescribeTaskQueueRequest{Namespace: s.namespace,
				TaskQueue: &taskqueuepb.TaskQueue{Name: zendeskQueue, Kind: enumspb.TASK_QUEUE_KIND_NORMAL}, TaskQueueType: enumspb.TASK_QUEUE_TYPE_ACTIVITY, ReportStats: true, ReportConfig: true})
			fmt.Fprintf(s.log, "DEBUG %s backlog %d add %.1f dispatch %.1f zd=%+v\n", time.Now().Format("15:04:05.000"), n, d.GetStats().GetTasksAddRate(), d.GetStats().GetTasksDispatchRate(), s.zd.Load())
		}
		if n >= int64(res.SaturatedAt) {
			break
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(s.log, "bench: the Zendesk queue's backlog reached only %d reads; approving anyway\n", n)
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	var loaded []time.Duration
	var backlogs []int64
	began = time.Now()
	for i := range approvals {
		n, age, err := backlog(ctx, s, zendeskQueue)
		if err != nil {
			return res, err
		}
		backlogs = append(backlogs, n)
		res.BacklogAgeMax = max(res.BacklogAgeMax, Duration(age))
		if n >= int64(res.SaturatedAt) {
			res.Saturated++
		}
		d, err := one("prio-loaded", i)
		if err != nil {
			return res, err
		}
		if os.Getenv("BENCH_DEBUG") != "" {
			fmt.Fprintf(s.log, "DEBUG %s approval %d: backlog %d age %s -> %s\n", time.Now().Format("15:04:05.000"), i, n, age, d)
		}
		loaded = append(loaded, d)
		// Spread the approvals over the scan's burst.
		time.Sleep(500 * time.Millisecond)
	}
	res.Loaded = summarize(loaded, 1, time.Since(began))
	res.BacklogMin, res.BacklogMax = slices.Min(backlogs), slices.Max(backlogs)
	zd := s.zd.Load()
	res.ZendeskMaxPerMinute, res.Throttled = zd.MaxInWindow, zd.Throttled
	if res.StartWait, res.QueueWait, err = waits(ctx, s, "prio-loaded", base, approvals, zendeskQueue); err != nil {
		return res, err
	}
	// The scans stop here, so that nothing runs on after the phase: a
	// scan still starting drafts is terminated, and the drafts it started
	// stay where they are when the worker stops.
	select {
	case err := <-scanned: // every draft started before the approvals were done
		if err != nil {
			return res, err
		}
	default:
		cancelScan()
		<-scanned
	}
	for round := 0; round <= rounds; round++ {
		_ = s.temporal.TerminateWorkflow(ctx, fmt.Sprintf("bench-prio-scan-%d-%d", base, round), "", "bench: the priority phase is over")
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
