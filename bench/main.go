package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// Sizes of a run. "full" is the README's run; "tiny" proves the bench
// still works, in the test suite.
type Size struct {
	Name                           string
	ApproveSequential              int
	ApproveConcurrent, ApproveEach int
	EnrichEvents, EnrichTickets    int
	LedgerActions, Contenders      int
	OpenWorkflows                  int
	FloorSequential                int
	FloorConcurrent, FloorEach     int
	RiverSequential                int
	RiverInserters, RiverTotal     int
	ScanTickets                    int
	// PriorityApprovals is how many approvals the priority phase times
	// with the queues idle and again while a scan of ScanTickets
	// saturates the Zendesk queue.
	PriorityApprovals int
}

var sizes = map[string]Size{
	"full": {Name: "full", ApproveSequential: 100, ApproveConcurrent: 32, ApproveEach: 8,
		EnrichEvents: 10000, EnrichTickets: 1000, LedgerActions: 2000, Contenders: 64, OpenWorkflows: 1000,
		FloorSequential: 100, FloorConcurrent: 32, FloorEach: 8, RiverSequential: 200, RiverInserters: 32, RiverTotal: 3200,
		ScanTickets: 2000, PriorityApprovals: 30},
	"tiny": {Name: "tiny", ApproveSequential: 5, ApproveConcurrent: 4, ApproveEach: 2,
		EnrichEvents: 200, EnrichTickets: 20, LedgerActions: 100, Contenders: 8, OpenWorkflows: 50,
		FloorSequential: 5, FloorConcurrent: 4, FloorEach: 2, RiverSequential: 10, RiverInserters: 4, RiverTotal: 40,
		ScanTickets: 60, PriorityApprovals: 3},
}

func main() {
	size := flag.String("size", "full", "full or tiny")
	jsonPath := flag.String("json", "bench-results.json", "where to write the figures as JSON (- for stdout)")
	only := flag.String("only", "", "comma-separated phases to run (approve,lifecycle,floor,enrichment,memory,scan,priority,ledger,river); empty runs all")
	flag.Func("dynamic-config", "a dev-server dynamic config value KEY=VALUE (repeatable), for tuning", func(v string) error {
		k, val, ok := strings.Cut(v, "=")
		if !ok {
			return fmt.Errorf("want KEY=VALUE")
		}
		dynamicConfig[k] = val
		return nil
	})
	flag.StringVar(&externalTemporal, "temporal", "", "host:port of a Temporal server on PostgreSQL (with supportflow's search attributes) for the server column; empty starts one")
	topologies := flag.String("topologies", "dev,server", "comma-separated columns to measure: dev (the CLI's dev server) and server (Temporal on PostgreSQL)")
	flag.Parse()
	for _, p := range strings.Split(*only, ",") {
		if p = strings.TrimSpace(p); p != "" {
			phases[p] = true
		}
	}
	sz, ok := sizes[*size]
	if !ok {
		fmt.Fprintf(os.Stderr, "bench: -size must be full or tiny, not %q\n", *size)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var res Results
	for i, topology := range strings.Split(*topologies, ",") {
		topology = strings.TrimSpace(topology)
		if topology != "dev" && topology != "server" {
			fmt.Fprintf(os.Stderr, "bench: -topologies takes dev and server, not %q\n", topology)
			os.Exit(2)
		}
		r, err := run(ctx, sz, os.Stderr, topology)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench (%s): %v\n", topology, err)
			os.Exit(1)
		}
		if i == 0 {
			res = r
		} else {
			res.Columns = append(res.Columns, r)
			res.Elapsed += r.Elapsed
		}
	}
	printTable(os.Stdout, res)
	b, _ := json.MarshalIndent(res, "", "  ")
	if *jsonPath == "-" {
		fmt.Println(string(b))
		return
	}
	if err := os.WriteFile(*jsonPath, append(b, '\n'), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	fmt.Printf("\nfigures as JSON: %s\n", *jsonPath)
}

// Results are every figure of a run.
type Results struct {
	Size string `json:"size"`
	// Topology is the Temporal the figures were measured on: "dev" (the
	// CLI's dev server) or "server" (the Temporal server on PostgreSQL).
	Topology string `json:"topology"`
	// Columns are the other topologies' figures (Temporal's phases only).
	Columns []Results `json:"columns,omitempty"`
	Machine string    `json:"machine"`
	Started time.Time `json:"started"`
	Elapsed Duration  `json:"elapsed"`

	ApproveSequential Latency `json:"approve_to_posted_sequential"`
	ApproveConcurrent Latency `json:"approve_to_posted_concurrent"`

	Enrichment Enrichment `json:"enrichment"`
	Scan       ScanLoad   `json:"scan_under_limits"`
	// Priority is approve -> reply posted while a scan saturates the
	// Zendesk queue.
	Priority  PriorityLoad `json:"approve_under_scan"`
	Ledger    LedgerCost   `json:"ledger"`
	Memory    Memory       `json:"worker_memory"`
	Lifecycle Lifecycle    `json:"ticket_lifecycle"`

	TemporalFloorSequential Latency    `json:"temporal_noop_floor_sequential"`
	TemporalFloorConcurrent Latency    `json:"temporal_noop_floor_concurrent"`
	River                   RiverFloor `json:"river_floor"`
}

// Latency summarizes a set of timings.
type Latency struct {
	N           int      `json:"n"`
	Concurrency int      `json:"concurrency"`
	P50         Duration `json:"p50"`
	P95         Duration `json:"p95"`
	P99         Duration `json:"p99"`
	Max         Duration `json:"max"`
	PerSecond   float64  `json:"per_second"`
}

// Duration marshals as milliseconds.
type Duration time.Duration

// MarshalJSON writes milliseconds with microsecond precision.
func (d Duration) MarshalJSON() ([]byte, error) {
	return []byte(fmt.Sprintf("%.3f", float64(d)/float64(time.Millisecond))), nil
}

func (d Duration) String() string {
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}

func machine() string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range splitLines(string(b)) {
			if len(line) > 10 && line[:10] == "model name" {
				if i := indexByte(line, ':'); i > 0 {
					cpu = trim(line[i+1:])
					break
				}
			}
		}
	}
	return fmt.Sprintf("%d cores, %s, %s/%s, %s", runtime.NumCPU(), cpu, runtime.GOOS, runtime.GOARCH, runtime.Version())
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// phases selects what a run measures; empty means everything.
var phases = map[string]bool{}

func want(phase string) bool { return len(phases) == 0 || phases[phase] }
