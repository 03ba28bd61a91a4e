package policy

import (
	"go.temporal.io/sdk/temporal"

	"github.com/supportflow/supportflow"
)

// AppError is the one way an activity or a workflow fails with one of the
// contract's error types: retryable or not as supportflow.ErrorTypes says,
// so the table and what Temporal does cannot disagree. msg is the error's
// message, cause its cause (may be nil), details what a caller may read
// from it. A type the table does not list is a programming error: it is
// returned non-retryable, so nothing retries on a guess
// (TestAppError_EveryTypeFromTheTable).
func AppError(msg, typ string, cause error, details ...any) error {
	e, ok := supportflow.LookupErrorType(typ)
	return temporal.NewApplicationErrorWithOptions(msg, typ, temporal.ApplicationErrorOptions{
		NonRetryable: !ok || !e.Retryable,
		Cause:        cause,
		Details:      details,
	})
}
