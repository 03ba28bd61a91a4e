package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

func splitLines(s string) []string   { return strings.Split(s, "\n") }
func indexByte(s string, c byte) int { return strings.IndexByte(s, c) }
func trim(s string) string           { return strings.TrimSpace(s) }

func ms(d Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

// printTable prints every figure with its goal beside it.
func printTable(w io.Writer, r Results) {
	cols := append([]Results{r}, r.Columns...)
	fmt.Fprintf(w, "supportflow bench (%s) on %s, %s\n\n", r.Size, r.Machine, time.Duration(r.Elapsed).Round(time.Second))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := []string{"MEASURE"}
	for _, c := range cols {
		head = append(head, "FIGURE ("+topologyName(c.Topology)+")")
	}
	fmt.Fprintln(tw, strings.Join(append(head, "GOAL", ""), "\t"))
	// row prints one measure: its figure in every column (a measure that
	// does not touch Temporal only in the first), the goal, and the
	// verdict of each column that has the figure.
	row := func(name string, temporal bool, figure func(Results) string, goal string, met func(Results) bool) {
		cells := []string{name}
		var verdicts []string
		for i, c := range cols {
			if i > 0 && !temporal {
				cells = append(cells, "(as dev)")
				continue
			}
			cells = append(cells, figure(c))
			if met != nil {
				verdicts = append(verdicts, verdict(met(c)))
			}
		}
		fmt.Fprintln(tw, strings.Join(append(cells, goal, strings.Join(verdicts, " / ")), "\t"))
	}
	row("1. approve -> reply posted, one at a time", true, func(c Results) string {
		as := c.ApproveSequential
		return fmt.Sprintf("p50 %s  p95 %s  p99 %s  (n=%d)", ms(as.P50), ms(as.P95), ms(as.P99), as.N)
	}, "p50 <= 40 ms, p99 <= 150 ms", func(c Results) bool {
		as := c.ApproveSequential
		return time.Duration(as.P50) <= 40*time.Millisecond && time.Duration(as.P99) <= 150*time.Millisecond
	})
	row(fmt.Sprintf("   approve -> reply posted, %d at once", r.ApproveConcurrent.Concurrency), true, func(c Results) string {
		ac := c.ApproveConcurrent
		return fmt.Sprintf("p50 %s  p95 %s  p99 %s  (%.0f/s)", ms(ac.P50), ms(ac.P95), ms(ac.P99), ac.PerSecond)
	}, "", nil)
	row("2. enrichment, sustained by one worker", true, func(c Results) string {
		return fmt.Sprintf("%.0f lookups/s (%d tickets)", c.Enrichment.PerSecond, c.Enrichment.Tickets)
	}, ">= 150/s", func(c Results) bool { return c.Enrichment.PerSecond >= 150 })
	e := r.Enrichment
	row(fmt.Sprintf("   burst: %d events on %d tickets", e.Events, e.Tickets), true, func(c Results) string {
		e := c.Enrichment
		return fmt.Sprintf("%d lookups (sent in %.1f s, drained at %.0f/s)", e.Lookups, e.SendSeconds, e.BurstPerSecond)
	}, fmt.Sprintf("exactly %d", e.Tickets), func(c Results) bool { return c.Enrichment.Lookups == c.Enrichment.Tickets })
	l := r.Ledger
	row("3. ledger per action, alone", false, func(c Results) string {
		return fmt.Sprintf("%.1f commits, %.1f round trips, p50 %s  p99 %s", l.CommitsPerAction, l.RoundTripsPerAction, ms(l.Alone.P50), ms(l.Alone.P99))
	}, "<= 3 commits, p50 <= 2 ms", func(Results) bool {
		return l.CommitsPerAction <= 3 && time.Duration(l.Alone.P50) <= 2*time.Millisecond
	})
	row(fmt.Sprintf("   ledger per action, %d contenders", l.Contended.Concurrency), false, func(Results) string {
		return fmt.Sprintf("p50 %s  p99 %s  (%.0f actions/s)", ms(l.Contended.P50), ms(l.Contended.P99), l.Contended.PerSecond)
	}, "p99 <= 5 ms", func(Results) bool { return time.Duration(l.Contended.P99) <= 5*time.Millisecond })
	row(fmt.Sprintf("4. worker RSS, %d open enrichments", r.Memory.OpenWorkflows), true, func(c Results) string {
		m := c.Memory
		return fmt.Sprintf("%.0f MB (idle %.0f MB, peak %.0f MB)", m.RSSMB, m.IdleRSSMB, m.PeakRSSMB)
	}, "<= 150 MB", func(c Results) bool { return c.Memory.RSSMB <= 150 })
	row(fmt.Sprintf("   a scan of %d tickets under the limits", r.Scan.Tickets), true, func(c Results) string {
		sc := c.Scan
		return fmt.Sprintf("%.1f drafts/s; Zendesk max %d/min (limit %d); model %d at once (cap %d); %d refused",
			sc.DraftsPerSecond, sc.ZendeskMaxPerMinute, sc.ZendeskPerMinute, sc.ModelPeak, sc.ModelConcurrency, sc.Throttled)
	}, "within limits, no 429", func(c Results) bool {
		sc := c.Scan
		return sc.Throttled == 0 && sc.ZendeskMaxPerMinute <= sc.ZendeskPerMinute && sc.ModelPeak <= sc.ModelConcurrency
	})
	row(fmt.Sprintf("   approve -> reply posted while a scan of %d saturates the Zendesk queue (%d/min)", r.Priority.ScanTickets, r.Priority.ZendeskPerMinute), true, func(c Results) string {
		pr := c.Priority
		return fmt.Sprintf("p50 %s  p95 %s  max %s  (n=%d; idle: p50 %s  p95 %s  max %s); PostReply's wait in the queue p50 %s, max %s; "+
			"%d drafts started, backlog %d-%d reads (oldest %.0f s), %d/%d approvals behind >= %d; %d refused",
			ms(pr.Loaded.P50), ms(pr.Loaded.P95), ms(pr.Loaded.Max), pr.Loaded.N, ms(pr.Idle.P50), ms(pr.Idle.P95), ms(pr.Idle.Max),
			ms(pr.QueueWait.P50), ms(pr.QueueWait.Max),
			pr.DraftsStarted, pr.BacklogMin, pr.BacklogMax, time.Duration(pr.BacklogAgeMax).Seconds(), pr.Saturated, pr.Loaded.N, pr.SaturatedAt, pr.Throttled)
	}, "p95 within 2 s of idle", func(c Results) bool { return c.Priority.Met() })
	row("5. one ticket's lifecycle", true, func(c Results) string {
		lc := c.Lifecycle
		return fmt.Sprintf("%d history events (enrich %d, draft %d, execute %d), ~%d actions, %s",
			lc.TotalEvents, lc.HistoryEvents["enrich"], lc.HistoryEvents["draft"], lc.HistoryEvents["execute"], lc.Actions, ms(lc.Duration))
	}, "reported", nil)
	row("6. floor: no-op Temporal workflow, one at a time", true, func(c Results) string {
		fs := c.TemporalFloorSequential
		return fmt.Sprintf("p50 %s  p95 %s  p99 %s", ms(fs.P50), ms(fs.P95), ms(fs.P99))
	}, "reference", nil)
	row(fmt.Sprintf("   floor: no-op Temporal workflow, %d at once", r.TemporalFloorConcurrent.Concurrency), true, func(c Results) string {
		fc := c.TemporalFloorConcurrent
		return fmt.Sprintf("%.0f workflows/s, p50 %s", fc.PerSecond, ms(fc.P50))
	}, "reference", nil)
	rv := r.River
	row("   floor: River no-op job, one at a time", false, func(Results) string {
		return fmt.Sprintf("p50 %s  p95 %s  p99 %s", ms(Duration(rv.P50)), ms(Duration(rv.P95)), ms(Duration(rv.P99)))
	}, "reference", nil)
	row(fmt.Sprintf("   floor: River no-op job, %d inserters", rv.Inserters), false, func(Results) string {
		return fmt.Sprintf("%.0f jobs/s", rv.JobsPerSec)
	}, "reference", nil)
	tw.Flush()
}

// topologyName is a column's heading.
func topologyName(t string) string {
	if t == "server" {
		return "Temporal server on PostgreSQL"
	}
	return "dev server"
}
