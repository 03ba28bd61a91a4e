package heartbeat

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"
)

var errLost = errors.New("the claim was lost")

// A tick that fails while the work runs stops the work and is the result;
// a tick that fails just as the work succeeded (a lease extension that
// lost because the work had recorded the action done) leaves the work's
// success standing.
func TestRun_ATickThatLosesAfterTheWorkSucceededDoesNotFailIt(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	var got []error
	env.RegisterActivityWithOptions(func(ctx context.Context, succeed bool) error {
		ticked := make(chan struct{})
		err := Run(ctx, 5*time.Millisecond, func() any { return "beat" },
			func(context.Context) error {
				select {
				case <-ticked:
				default:
					close(ticked)
				}
				// Give the work time to return before the tick reports.
				time.Sleep(20 * time.Millisecond)
				return errLost
			},
			func(wctx context.Context) error {
				<-ticked
				if succeed {
					return nil // finished just as the tick ran
				}
				<-wctx.Done()
				return context.Cause(wctx)
			})
		got = append(got, err)
		return nil
	}, activity.RegisterOptions{Name: "run"})
	for _, succeed := range []bool{true, false} {
		_, err := env.ExecuteActivity("run", succeed)
		require.NoError(t, err)
	}
	require.Len(t, got, 2)
	assert.NoError(t, got[0], "the work had succeeded: its result stands")
	assert.ErrorIs(t, got[1], errLost, "the work was still running: the tick's error stops it")
}
