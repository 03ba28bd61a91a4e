package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// RiverFloor is River's cost per no-op job on this PostgreSQL.
type RiverFloor struct {
	// Latency from Insert to the job's Work method running, one job at a
	// time (insert, wait for it to be worked, next).
	P50        time.Duration `json:"p50_ns"`
	P95        time.Duration `json:"p95_ns"`
	P99        time.Duration `json:"p99_ns"`
	Sequential int           `json:"sequential"` // jobs measured one at a time
	// Throughput with Inserters goroutines inserting concurrently (each
	// inserting then waiting for its own job to be worked, back to back)
	// over Total jobs.
	Inserters  int     `json:"inserters"`
	Total      int     `json:"total"`
	JobsPerSec float64 `json:"jobs_per_second"`
}

const (
	// riverQueue is the one queue the benchmark client works.
	riverQueue = "bench"
	// riverMaxWorkers is that queue's MaxWorkers.
	riverMaxWorkers = 100
	// riverPoolSlack is connections beyond inserters and workers for River's
	// own services (notifier LISTEN, producer fetches, completer, leader
	// election, maintenance).
	riverPoolSlack = 10
	// riverWarmup jobs are worked, unmeasured, before the sequential run so
	// that connection setup and the first fetch are not in the figures.
	riverWarmup = 3
	// riverStopTimeout bounds the clean stop of the client.
	riverStopTimeout = 30 * time.Second
)

// riverNoopArgs are the arguments of the benchmark's no-op job. Seq tells
// the worker which waiting inserter to wake.
type riverNoopArgs struct {
	Seq int64 `json:"seq"`
}

func (riverNoopArgs) Kind() string { return "supportflow_bench_noop" }

// riverWaiters hands the time a job's Work started to the goroutine that
// inserted it. A waiter is registered before Insert, since the job can be
// worked before Insert returns.
type riverWaiters struct {
	mu      sync.Mutex
	next    int64
	pending map[int64]chan time.Time
}

// add registers a new waiter and returns its sequence number and channel.
func (w *riverWaiters) add() (int64, <-chan time.Time) {
	ch := make(chan time.Time, 1)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.next++
	w.pending[w.next] = ch
	return w.next, ch
}

// remove forgets a waiter (after it was woken, or when its insert failed).
func (w *riverWaiters) remove(seq int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.pending, seq)
}

// wake reports that job seq started working at t. Unknown sequence numbers
// (a waiter that gave up) are ignored.
func (w *riverWaiters) wake(seq int64, t time.Time) {
	w.mu.Lock()
	ch, ok := w.pending[seq]
	delete(w.pending, seq)
	w.mu.Unlock()
	if ok {
		ch <- t // buffered, never blocks
	}
}

// riverNoopWorker does nothing but tell the inserter its job has started.
type riverNoopWorker struct {
	river.WorkerDefaults[riverNoopArgs]
	waiters *riverWaiters
}

func (w *riverNoopWorker) Work(_ context.Context, job *river.Job[riverNoopArgs]) error {
	w.waiters.wake(job.Args.Seq, time.Now())
	return nil
}

// measureRiver migrates River's schema into databaseURL (rivermigrate, pgx
// v5 pool), starts a River client with one queue (MaxWorkers 100,
// FetchPollInterval and FetchCooldown at River's minimums so a lightly
// loaded queue is worked promptly; River's LISTEN/NOTIFY path is on by
// default), and measures: sequential jobs one at a time, then total jobs
// from inserters concurrent inserters. It stops the client cleanly before
// returning.
func measureRiver(ctx context.Context, databaseURL string, sequential, inserters, total int) (_ RiverFloor, err error) {
	if sequential < 0 || total < 0 {
		return RiverFloor{}, fmt.Errorf("river: sequential (%d) and total (%d) must not be negative", sequential, total)
	}
	if total > 0 && inserters < 1 {
		return RiverFloor{}, fmt.Errorf("river: %d inserters; need at least 1", inserters)
	}

	poolConfig, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return RiverFloor{}, fmt.Errorf("river: parsing database URL: %w", err)
	}
	poolConfig.MaxConns = int32(max(inserters, 1) + riverMaxWorkers + riverPoolSlack)
	pool, err := pgxpool.NewWithConfig(ctx, poolConfig)
	if err != nil {
		return RiverFloor{}, fmt.Errorf("river: opening pool: %w", err)
	}
	defer pool.Close()

	driver := riverpgxv5.New(pool)
	migrator, err := rivermigrate.New(driver, nil)
	if err != nil {
		return RiverFloor{}, fmt.Errorf("river: creating migrator: %w", err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return RiverFloor{}, fmt.Errorf("river: migrating schema: %w", err)
	}

	waiters := &riverWaiters{pending: map[int64]chan time.Time{}}
	workers := river.NewWorkers()
	if err := river.AddWorkerSafely(workers, &riverNoopWorker{waiters: waiters}); err != nil {
		return RiverFloor{}, fmt.Errorf("river: adding worker: %w", err)
	}
	client, err := river.NewClient(driver, &river.Config{
		FetchCooldown:     river.FetchCooldownMin,
		FetchPollInterval: river.FetchPollIntervalMin,
		Queues:            map[string]river.QueueConfig{riverQueue: {MaxWorkers: riverMaxWorkers}},
		Workers:           workers,
		// River's default logger writes warnings to stdout, where the
		// benchmark prints its table.
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return RiverFloor{}, fmt.Errorf("river: creating client: %w", err)
	}
	if err := client.Start(ctx); err != nil {
		return RiverFloor{}, fmt.Errorf("river: starting client: %w", err)
	}
	defer func() {
		// Stop even when ctx is done, but not forever.
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), riverStopTimeout)
		defer cancel()
		if stopErr := client.Stop(stopCtx); stopErr != nil {
			err = errors.Join(err, fmt.Errorf("river: stopping client: %w", stopErr))
		}
	}()

	// runOne inserts one job and waits for its Work to start, returning the
	// time from just before Insert to then.
	runOne := func() (time.Duration, error) {
		seq, started := waiters.add()
		opts := &river.InsertOpts{Queue: riverQueue}
		begin := time.Now()
		if _, err := client.Insert(ctx, riverNoopArgs{Seq: seq}, opts); err != nil {
			waiters.remove(seq)
			return 0, fmt.Errorf("river: inserting job: %w", err)
		}
		select {
		case t := <-started:
			return t.Sub(begin), nil
		case <-ctx.Done():
			waiters.remove(seq)
			return 0, fmt.Errorf("river: waiting for job %d to be worked: %w", seq, context.Cause(ctx))
		}
	}

	for range riverWarmup {
		if _, err := runOne(); err != nil {
			return RiverFloor{}, fmt.Errorf("warm-up: %w", err)
		}
	}

	floor := RiverFloor{Sequential: sequential, Inserters: inserters, Total: total}

	latencies := make([]time.Duration, 0, sequential)
	for range sequential {
		d, err := runOne()
		if err != nil {
			return RiverFloor{}, err
		}
		latencies = append(latencies, d)
	}
	slices.Sort(latencies)
	floor.P50 = riverPercentile(latencies, 50)
	floor.P95 = riverPercentile(latencies, 95)
	floor.P99 = riverPercentile(latencies, 99)

	if total > 0 {
		var (
			claimed  atomic.Int64 // jobs taken by inserters so far
			failed   atomic.Bool  // an inserter failed: the others stop too
			wg       sync.WaitGroup
			errOnce  sync.Once
			firstErr error
		)
		begin := time.Now()
		for range inserters {
			wg.Go(func() {
				for !failed.Load() && claimed.Add(1) <= int64(total) {
					if _, err := runOne(); err != nil {
						errOnce.Do(func() { firstErr = err })
						failed.Store(true)
						return
					}
				}
			})
		}
		wg.Wait()
		elapsed := time.Since(begin)
		if firstErr != nil {
			return RiverFloor{}, firstErr
		}
		floor.JobsPerSec = float64(total) / elapsed.Seconds()
	}

	return floor, nil
}

// riverPercentile returns the p-th percentile (0 < p <= 100) of ds, which
// must be sorted ascending, by the nearest-rank method: the smallest value
// with at least p% of ds at or below it. It returns 0 for an empty ds.
func riverPercentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(ds))))
	rank = min(max(rank, 1), len(ds))
	return ds[rank-1]
}
