package api_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/supportflow/supportflow/internal/api"
	"github.com/supportflow/supportflow/ledger"
)

// newServer builds the API with no database, starter or Temporal behind
// it: enough for what is decided before a handler reads anything.
func newServer(t *testing.T, tokens []api.Token, logs *bytes.Buffer) *api.Server {
	t.Helper()
	srv, err := api.New(api.Config{Tokens: tokens, WebhookSecret: "webhook-secret", ZendeskUserID: 1},
		nil, ledger.New(nil, "acme"), nil, nil, slog.New(slog.NewJSONHandler(logs, nil)))
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	return srv
}

// Each route needs its role: a token without it is refused 403 before
// the handler runs, with the role and the token's name; a token with it
// reaches the handler. The requests carry IDs the handlers refuse (400)
// before reading anything, so reaching the handler needs no database.
func TestAuthed_EachRouteNeedsItsRole(t *testing.T) {
	tokens := map[api.Role]api.Token{
		api.RoleApp:      {Name: "helpdesk-app", Roles: []api.Role{api.RoleApp}, Secret: "app-token-0123456789"},
		api.RoleApprover: {Name: "alice", Roles: []api.Role{api.RoleApprover}, Secret: "approver-token-0123456789"},
		api.RoleOperator: {Name: "ops", Roles: []api.Role{api.RoleOperator}, Secret: "operator-token-0123456789"},
	}
	every := api.Token{Name: "everything", Roles: api.Roles, Secret: "every-role-token-0123456789"}
	var logs bytes.Buffer
	srv := newServer(t, []api.Token{tokens[api.RoleApp], tokens[api.RoleApprover], tokens[api.RoleOperator], every}, &logs)

	routes := []struct {
		method, path string
		role         api.Role
	}{
		{"POST", "/tickets/x/drafts", api.RoleApp},
		{"GET", "/tickets/x/draft", api.RoleApp},
		{"GET", "/tickets/x/draft/events", api.RoleApp},
		{"GET", "/actions/not-a-key", api.RoleApp},
		{"POST", "/proposals/bad%20id/approve", api.RoleApprover},
		{"POST", "/proposals/bad%20id/reject", api.RoleApprover},
		{"POST", "/proposals/bad%20id/retry", api.RoleOperator},
	}
	do := func(method, path, token string) (int, api.Problem) {
		req := httptest.NewRequest(method, path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		var p api.Problem
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p), "%s", rec.Body)
		return rec.Code, p
	}
	for _, rt := range routes {
		for role, tok := range tokens {
			code, p := do(rt.method, rt.path, tok.Secret)
			if role == rt.role {
				assert.Equal(t, http.StatusBadRequest, code, "%s %s with the %s role reaches the handler: %+v", rt.method, rt.path, role, p)
				continue
			}
			assert.Equal(t, http.StatusForbidden, code, "%s %s with the %s role: %+v", rt.method, rt.path, role, p)
			assert.Equal(t, "/problems/forbidden", p.Type)
			assert.Contains(t, p.Detail, "needs the "+string(rt.role)+" role")
			assert.Contains(t, p.Detail, `token "`+tok.Name+`"`)
		}
		code, _ := do(rt.method, rt.path, every.Secret)
		assert.Equal(t, http.StatusBadRequest, code, "a token with every role reaches %s %s", rt.method, rt.path)
		code, p := do(rt.method, rt.path, "")
		assert.Equal(t, http.StatusUnauthorized, code)
		assert.Equal(t, "/problems/unauthorized", p.Type)
		code, _ = do(rt.method, rt.path, "not-a-token-0123456789")
		assert.Equal(t, http.StatusUnauthorized, code)
	}
	assert.Contains(t, logs.String(), `"token":"helpdesk-app"`, "a refusal is logged with the token's name")
	for _, tok := range append([]api.Token{every}, tokens[api.RoleApp], tokens[api.RoleApprover], tokens[api.RoleOperator]) {
		assert.NotContains(t, logs.String(), tok.Secret, "a token is never logged")
	}

	// What needs no API token is unchanged: the health endpoint.
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	assert.Equal(t, http.StatusOK, rec.Code)
}

// New refuses tokens it could not attribute decisions to, naming the
// token and never its secret.
func TestNew_RefusesTokensItCannotAttribute(t *testing.T) {
	const secret = "a-secret-0123456789"
	for name, tc := range map[string]struct {
		tokens []api.Token
		want   string
	}{
		"none":           {nil, "at least one API token"},
		"no name":        {[]api.Token{{Roles: api.Roles, Secret: secret}}, "token 1: the name"},
		"a bad name":     {[]api.Token{{Name: "a b", Roles: api.Roles, Secret: secret}}, "token 1: the name"},
		"no role":        {[]api.Token{{Name: "a", Secret: secret}}, `token "a": its roles`},
		"an unknown one": {[]api.Token{{Name: "a", Roles: []api.Role{"admin"}, Secret: secret}}, `token "a": its roles`},
		"a short secret": {[]api.Token{{Name: "a", Roles: api.Roles, Secret: "short"}}, `the token of "a" must be at least 16`},
		"a shared name": {[]api.Token{{Name: "a", Roles: api.Roles, Secret: secret}, {Name: "a", Roles: api.Roles, Secret: secret + "x"}},
			`two tokens are named "a"`},
		"a shared secret": {[]api.Token{{Name: "a", Roles: api.Roles, Secret: secret}, {Name: "b", Roles: api.Roles, Secret: secret}},
			`tokens "a" and "b" have the same token`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := api.New(api.Config{Tokens: tc.tokens, WebhookSecret: "webhook-secret", ZendeskUserID: 1}, nil, ledger.New(nil, "acme"), nil, nil, nil)
			require.ErrorIs(t, err, api.ErrConfig)
			assert.ErrorContains(t, err, tc.want)
			assert.NotContains(t, err.Error(), secret)
		})
	}
}

// A token shows its name and roles, never its secret, printed or logged.
func TestToken_NeverShowsItsSecret(t *testing.T) {
	tok := api.Token{Name: "alice", Roles: []api.Role{api.RoleApprover, api.RoleOperator}, Secret: "alice-secret-0123456789"}
	assert.Equal(t, "alice (approver+operator)", tok.String())
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("x", "token", tok)
	assert.Contains(t, logs.String(), `"name":"alice"`)
	assert.NotContains(t, logs.String(), tok.Secret)
	assert.True(t, tok.Has(api.RoleOperator))
	assert.False(t, tok.Has(api.RoleApp))
}
