package policy

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
)

// RetryAfter is implemented by errors that carry a server's Retry-After
// (a 429). The next attempt waits at least that long.
type RetryAfter interface {
	RetryAfterDelay() time.Duration
}

// NewRetryInterceptor returns the worker interceptor that sets the next
// retry delay of every retryable activity failure from the one policy:
// RetryDelay for the attempt that failed, raised to the error's Retry-After
// when it has one, but never past RetryCap (300 s). Non-retryable errors and cancellations pass through
// untouched. Register it on every worker (and test environment).
//
// onRetry, if given, is called with the activity type for every failure
// it annotates for a retry (the metrics count them).
func NewRetryInterceptor(d Durations, onRetry ...func(activityType string)) interceptor.WorkerInterceptor {
	r := &retryInterceptor{d: d, rand: rand.Float64}
	if len(onRetry) > 0 {
		r.onRetry = onRetry[0]
	}
	return r
}

type retryInterceptor struct {
	interceptor.WorkerInterceptorBase
	d       Durations
	rand    func() float64
	onRetry func(activityType string)
}

func (r *retryInterceptor) InterceptActivity(ctx context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	return &retryActivityInbound{ActivityInboundInterceptorBase: interceptor.ActivityInboundInterceptorBase{Next: next}, r: r}
}

type retryActivityInbound struct {
	interceptor.ActivityInboundInterceptorBase
	r *retryInterceptor
}

func (a *retryActivityInbound) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	res, err := a.Next.ExecuteActivity(ctx, in)
	if err == nil {
		return res, nil
	}
	info := activity.GetInfo(ctx)
	annotated := a.r.annotate(err, info.Attempt)
	if annotated != err && a.r.onRetry != nil {
		a.r.onRetry(info.ActivityType.Name)
	}
	return res, annotated
}

// annotate returns err with its next retry delay set, or err unchanged when
// it will not be retried.
func (r *retryInterceptor) annotate(err error, attempt int32) error {
	if errors.Is(err, context.Canceled) {
		return err
	}
	var appErr *temporal.ApplicationError
	isApp := errors.As(err, &appErr)
	if isApp && appErr.NonRetryable() {
		return err
	}
	var canceled *temporal.CanceledError
	if errors.As(err, &canceled) {
		return err
	}
	// A timeout is the server's verdict, retried by its RetryPolicy (same
	// backoff shape, no jitter); keep it a timeout so callers can tell.
	var timeout *temporal.TimeoutError
	if errors.As(err, &timeout) {
		return err
	}
	delay := r.d.RetryDelay(attempt, r.rand())
	// A server's Retry-After raises the delay, never past the retry cap: a
	// misconfigured or hostile Retry-After (an hour, a year) must not park
	// an approved action.
	var ra RetryAfter
	if errors.As(err, &ra) && ra.RetryAfterDelay() > delay {
		delay = min(ra.RetryAfterDelay(), r.d.Fill().RetryCap)
	}
	// Like the SDK, name a plain error's type after its Go type.
	typ, cause := fmt.Sprintf("%T", err), err
	if isApp && appErr == err {
		// Keep the activity's own error type so callers can still match on
		// it; its cause is the original chain.
		typ, cause = appErr.Type(), errors.Unwrap(appErr)
	}
	return temporal.NewApplicationErrorWithOptions(err.Error(), typ, temporal.ApplicationErrorOptions{
		NextRetryDelay: delay,
		Cause:          cause,
	})
}
