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
	fmt.Fprintf(w, "supportflow bench (%s) on %s, %s\n\n", r.Size, r.Machine, time.Duration(r.Elapsed).Round(time.Second))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(cols ...string) { fmt.Fprintln(tw, strings.Join(cols, "\t")) }
	row("MEASURE", "FIGURE", "GOAL", "")
	as, ac := r.ApproveSequential, r.ApproveConcurrent
	row("1. approve -> reply posted, one at a time", fmt.Sprintf("p50 %s  p95 %s  p99 %s  (n=%d)", ms(as.P50), ms(as.P95), ms(as.P99), as.N),
		"p50 <= 40 ms, p99 <= 150 ms", verdict(time.Duration(as.P50) <= 40*time.Millisecond && time.Duration(as.P99) <= 150*time.Millisecond))
	row(fmt.Sprintf("   approve -> reply posted, %d at once", ac.Concurrency), fmt.Sprintf("p50 %s  p95 %s  p99 %s  (%.0f/s)", ms(ac.P50), ms(ac.P95), ms(ac.P99), ac.PerSecond), "", "")
	e := r.Enrichment
	row("2. enrichment, sustained by one worker", fmt.Sprintf("%.0f lookups/s (%d tickets)", e.PerSecond, e.Tickets), ">= 150/s", verdict(e.PerSecond >= 150))
	row(fmt.Sprintf("   burst: %d events on %d tickets", e.Events, e.Tickets), fmt.Sprintf("%d lookups (sent in %.1f s, drained at %.0f/s)", e.Lookups, e.SendSeconds, e.BurstPerSecond),
		fmt.Sprintf("exactly %d", e.Tickets), verdict(e.Lookups == e.Tickets))
	l := r.Ledger
	row("3. ledger per action, alone", fmt.Sprintf("%.1f commits, %.1f round trips, p50 %s  p99 %s", l.CommitsPerAction, l.RoundTripsPerAction, ms(l.Alone.P50), ms(l.Alone.P99)),
		"<= 3 commits, p50 <= 2 ms", verdict(l.CommitsPerAction <= 3 && time.Duration(l.Alone.P50) <= 2*time.Millisecond))
	row(fmt.Sprintf("   ledger per action, %d contenders", l.Contended.Concurrency), fmt.Sprintf("p50 %s  p99 %s  (%.0f actions/s)", ms(l.Contended.P50), ms(l.Contended.P99), l.Contended.PerSecond),
		"p99 <= 5 ms", verdict(time.Duration(l.Contended.P99) <= 5*time.Millisecond))
	m := r.Memory
	row(fmt.Sprintf("4. worker RSS, %d open enrichments", m.OpenWorkflows), fmt.Sprintf("%.0f MB (idle %.0f MB, peak %.0f MB)", m.RSSMB, m.IdleRSSMB, m.PeakRSSMB), "<= 150 MB", verdict(m.RSSMB <= 150))
	lc := r.Lifecycle
	row("5. one ticket's lifecycle", fmt.Sprintf("%d history events (enrich %d, draft %d, execute %d), ~%d actions, %s",
		lc.TotalEvents, lc.HistoryEvents["enrich"], lc.HistoryEvents["draft"], lc.HistoryEvents["execute"], lc.Actions, ms(lc.Duration)), "reported", "")
	fs, fc := r.TemporalFloorSequential, r.TemporalFloorConcurrent
	row("6. floor: no-op Temporal workflow, one at a time", fmt.Sprintf("p50 %s  p95 %s  p99 %s", ms(fs.P50), ms(fs.P95), ms(fs.P99)), "reference", "")
	row(fmt.Sprintf("   floor: no-op Temporal workflow, %d at once", fc.Concurrency), fmt.Sprintf("%.0f workflows/s, p50 %s", fc.PerSecond, ms(fc.P50)), "reference", "")
	rv := r.River
	row("   floor: River no-op job, one at a time", fmt.Sprintf("p50 %s  p95 %s  p99 %s", ms(Duration(rv.P50)), ms(Duration(rv.P95)), ms(Duration(rv.P99))), "reference", "")
	row(fmt.Sprintf("   floor: River no-op job, %d inserters", rv.Inserters), fmt.Sprintf("%.0f jobs/s", rv.JobsPerSec), "reference", "")
	tw.Flush()
}
