package supportflow_test

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/supportflow/supportflow"
)

// Every ErrType constant is in the one table, once: an error type the
// table did not list would be made non-retryable by policy.AppError and
// answered 503 by the API, whatever it meant.
func TestErrorTypes_EveryTypeInTheTable(t *testing.T) {
	t.Parallel()
	f, err := parser.ParseFile(token.NewFileSet(), "errors.go", nil, 0)
	require.NoError(t, err)
	var consts []string
	ast.Inspect(f, func(n ast.Node) bool {
		if vs, ok := n.(*ast.ValueSpec); ok {
			for i, name := range vs.Names {
				if strings.HasPrefix(name.Name, "ErrType") {
					lit := vs.Values[i].(*ast.BasicLit)
					consts = append(consts, strings.Trim(lit.Value, `"`))
				}
			}
		}
		return true
	})
	require.NotEmpty(t, consts)
	var inTable []string
	for _, e := range supportflow.ErrorTypes {
		inTable = append(inTable, e.Type)
		assert.GreaterOrEqual(t, e.HTTPStatus, 400, e.Type)
	}
	assert.ElementsMatch(t, consts, inTable)
}

type typedError struct{ typ string }

func (e typedError) Error() string { return "the workflow said something about the customer" }
func (e typedError) Type() string  { return e.typ }

// What the API answers where its route has no answer of its own.
func TestRefusal(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err    error
		status int
		name   string
		ok     bool
	}{
		{fmt.Errorf("proposal 12: %w", supportflow.ErrNotFound), http.StatusNotFound, "not found", true},
		{fmt.Errorf("%w: ticket id -1", supportflow.ErrInvalidInput), http.StatusBadRequest, "invalid input", true},
		{fmt.Errorf("x: %w", supportflow.ErrAnswerConflict), http.StatusConflict, "another proposal answers this ticket", true},
		{fmt.Errorf("x: %w", supportflow.ErrNotAwaitingApproval), http.StatusConflict, "proposal is not awaiting approval", true},
		{fmt.Errorf("x: %w", supportflow.ErrConflict), http.StatusConflict, "already recorded with different content", true},
		{fmt.Errorf("update: %w", typedError{supportflow.ErrTypeStaleProposal}), http.StatusConflict, supportflow.ErrTypeStaleProposal, true},
		{typedError{supportflow.ErrTypeInvalidInput}, http.StatusBadRequest, supportflow.ErrTypeInvalidInput, true},
		{typedError{supportflow.ErrTypeModelQuotaExhausted}, http.StatusServiceUnavailable, supportflow.ErrTypeModelQuotaExhausted, true},
		{typedError{"SomethingElse"}, 0, "", false},
		{errors.New("connection refused"), 0, "", false},
	} {
		status, name, ok := supportflow.Refusal(c.err)
		assert.Equal(t, c.status, status, "%v", c.err)
		assert.Equal(t, c.name, name, "%v", c.err)
		assert.NotContains(t, name, "customer", "never the error's message")
		assert.Equal(t, c.ok, ok, "%v", c.err)
	}
}

// One rule for a ticket ID given as text, for the API's paths and the
// operator command's arguments alike: what each bad input gets.
func TestParseTicketID(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"1", "4242", "999999999999999999"} {
		_, err := supportflow.ParseTicketID(ok)
		assert.NoError(t, err, ok)
	}
	id, err := supportflow.ParseTicketID("4242")
	require.NoError(t, err)
	assert.Equal(t, int64(4242), id)
	for _, bad := range []string{"", "0", "-1", "+5", "007", "1e3", " 1", "abc", "1234567890123456789", strings.Repeat("9", 100)} {
		_, err := supportflow.ParseTicketID(bad)
		assert.ErrorIs(t, err, supportflow.ErrInvalidInput, "%q", bad)
		assert.LessOrEqual(t, len(err.Error()), 120, "the error quotes at most 40 bytes of the input")
	}
	_, err = supportflow.ParseProposalID("p-1.a_B")
	assert.NoError(t, err)
	for _, bad := range []string{"", "a/b", "a b", strings.Repeat("x", 129)} {
		_, err := supportflow.ParseProposalID(bad)
		assert.ErrorIs(t, err, supportflow.ErrInvalidInput, "%q", bad)
	}
}
