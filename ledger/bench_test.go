package ledger_test

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/ledger"
)

// BenchmarkLedgerPerAction measures what the ledger adds to one action
// with a comment: Reserve (one transaction) and Finish, which records the
// landed comment and settles the action applied in the same transaction.
// Two commits per action. Run it with
//
//	go test ./ledger -run '^$' -bench LedgerPerAction -benchtime 2000x
//
// contenders=1 runs GOMAXPROCS goroutines; the contended variant runs 64, each on its own action and
// ticket, so it measures the pool and the server under load, not lock
// waits on one row.
func BenchmarkLedgerPerAction(b *testing.B) {
	for _, contenders := range []int{1, 64} {
		b.Run(fmt.Sprintf("contenders=%d", contenders), func(b *testing.B) {
			l, _ := newLedger(b)
			ctx := context.Background()
			var seq atomic.Int64
			lat := make([]time.Duration, b.N)
			var idx atomic.Int64
			// RunParallel starts parallelism x GOMAXPROCS goroutines.
			b.SetParallelism(max(1, contenders/runtime.GOMAXPROCS(0)))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					n := seq.Add(1)
					start := time.Now()
					r, err := l.Reserve(ctx, ledger.ReserveRequest{
						Key: fmt.Sprintf("bench-%d:0", n), TicketID: n, Legs: []supportflow.Leg{{Kind: supportflow.LegReply, Target: fmt.Sprint(n)}},
						Claimant: "bench", Lease: time.Minute,
					})
					require.NoError(b, err)
					_, won, err := l.Finish(ctx, r.ID, "bench", "", ledger.LegOutcome{Kind: supportflow.LegReply, Target: fmt.Sprint(n),
						State: ledger.LegDone, ExternalID: fmt.Sprint(n), RequestID: fmt.Sprint(n)})
					require.NoError(b, err)
					require.True(b, won)
					lat[idx.Add(1)-1] = time.Since(start)
				}
			})
			b.StopTimer()
			lat = lat[:idx.Load()]
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(2, "commits/action")
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}
