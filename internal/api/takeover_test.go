package api_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/supportflow/supportflow/internal/api"
)

// POST /proposals/{id}/reply-myself hands a reply out, so it needs the
// approver role: an app-only token is refused 403 before anything is read;
// an approver reaches the handler, which refuses a malformed ID or body
// (400) before touching the database. (The claim itself runs on a real
// stack: tests/zendesk_app_test.go, TestReplyMyself_*.)
func TestReplyMyself_NeedsTheApproverRole(t *testing.T) {
	app := api.Token{Name: "helpdesk-app", Roles: []api.Role{api.RoleApp}, Secret: "app-token-0123456789"}
	approver := api.Token{Name: "zendesk-app", Roles: []api.Role{api.RoleApp, api.RoleApprover}, Secret: "approver-token-0123456789"}
	var logs bytes.Buffer
	srv := newServer(t, []api.Token{app, approver}, &logs)
	do := func(path, token, body string) (int, api.Problem) {
		req := httptest.NewRequest("POST", path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		var p api.Problem
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p), "%s", rec.Body)
		return rec.Code, p
	}
	code, p := do("/proposals/bad%20id/reply-myself", app.Secret, "")
	assert.Equal(t, http.StatusForbidden, code, "%+v", p)
	assert.Contains(t, p.Detail, "needs the approver role")

	code, p = do("/proposals/bad%20id/reply-myself", approver.Secret, `{"on_behalf_of":"Ada"}`)
	assert.Equal(t, http.StatusBadRequest, code, "%+v", p)
	assert.Equal(t, "/problems/invalid-proposal-id", p.Type)

	code, p = do("/proposals/p-1/reply-myself", approver.Secret, `{"rejected_by":"Ada"}`)
	assert.Equal(t, http.StatusBadRequest, code, "%+v", p)
	assert.Equal(t, "/problems/unknown-field", p.Type, "the body names the agent as on_behalf_of, nothing else")

	code, p = do("/proposals/p-1/reply-myself", "", "")
	assert.Equal(t, http.StatusUnauthorized, code, "%+v", p)
}
