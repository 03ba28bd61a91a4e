package policy_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/policy"
)

// Every contract error is made retryable or not exactly as the table
// says, with its type, message, cause and details; a type the table does
// not list is never retried.
func TestAppError_EveryTypeFromTheTable(t *testing.T) {
	t.Parallel()
	cause := errors.New("the cause")
	for _, e := range supportflow.ErrorTypes {
		err := policy.AppError("msg", e.Type, cause, 7)
		var app *temporal.ApplicationError
		require.ErrorAs(t, err, &app)
		assert.Equal(t, e.Type, app.Type())
		assert.Equal(t, !e.Retryable, app.NonRetryable(), e.Type)
		assert.ErrorIs(t, err, cause)
		var d int
		require.NoError(t, app.Details(&d))
		assert.Equal(t, 7, d)
	}
	var app *temporal.ApplicationError
	require.ErrorAs(t, policy.AppError("msg", "NotInTheTable", nil), &app)
	assert.True(t, app.NonRetryable())
}
