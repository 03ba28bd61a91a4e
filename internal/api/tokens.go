package api

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"strings"
)

// Role is a grant an API token holds. Each authenticated route needs one
// role; a token holds one or more, so a person who approves and an app that
// only drafts get different tokens.
type Role string

const (
	// RoleApp starts drafts and reads drafts, their events and actions:
	// what a helpdesk app needs to show a draft.
	RoleApp Role = "app"
	// RoleApprover approves and rejects proposals: the grant that sends a
	// reply and cancels subscriptions.
	RoleApprover Role = "approver"
	// RoleOperator retries failed executions: what an operator does
	// through the API.
	RoleOperator Role = "operator"
)

// Roles are every role, in the order the docs list them.
var Roles = []Role{RoleApp, RoleApprover, RoleOperator}

// Token is an API bearer token, the name decisions made with it are
// recorded under, and its roles.
type Token struct {
	// Name identifies the token in the ledger (the approval's decided_by)
	// and the logs: 1-64 of [A-Za-z0-9._-], unique among the tokens.
	Name string
	// Roles are what the token may do; at least one.
	Roles []Role
	// Secret is the bearer token itself: 16+ characters, unique, never
	// logged or shown (String and LogValue leave it out).
	Secret string
}

// Has reports whether t holds role.
func (t Token) Has(role Role) bool { return slices.Contains(t.Roles, role) }

// String names the token and its roles, never the secret, so a token
// printed by mistake shows nothing that authenticates.
func (t Token) String() string { return fmt.Sprintf("%s (%s)", t.Name, joinRoles(t.Roles)) }

// LogValue keeps the secret out of structured logs too.
func (t Token) LogValue() slog.Value {
	return slog.GroupValue(slog.String("name", t.Name), slog.String("roles", joinRoles(t.Roles)))
}

func joinRoles(roles []Role) string {
	s := make([]string, len(roles))
	for i, r := range roles {
		s[i] = string(r)
	}
	return strings.Join(s, "+")
}

// TokenFormat is how ParseToken reads a token, for errors and help.
const TokenFormat = "NAME:ROLE[+ROLE...]:TOKEN"

var tokenNamePattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// ParseToken reads one NAME:ROLE[+ROLE...]:TOKEN entry (a repeated role
// counts once). A bare token, from before tokens had names and roles, is
// refused with what to write instead rather than given every role. Errors
// name the entry only once its shape is known to be right, because a
// misread entry's "name" could be part of a token; they never contain the
// token.
func ParseToken(entry string) (Token, error) {
	name, rest, ok := strings.Cut(entry, ":")
	roles, secret, ok2 := strings.Cut(rest, ":")
	if !ok || !ok2 {
		return Token{}, fmt.Errorf("not %s: each API token now has a name and its roles, e.g. helpdesk-app:app:TOKEN or alice:approver:TOKEN (roles: %s)",
			TokenFormat, joinRoles(Roles))
	}
	if !tokenNamePattern.MatchString(name) {
		return Token{}, errors.New("the name must be 1-64 characters of A-Z, a-z, 0-9, '.', '_' and '-'")
	}
	t := Token{Name: name, Secret: secret}
	for _, r := range strings.Split(roles, "+") {
		if !slices.Contains(Roles, Role(r)) {
			return Token{}, fmt.Errorf("a role is empty or unknown (roles: %s, joined with +)", joinRoles(Roles))
		}
		if !t.Has(Role(r)) {
			t.Roles = append(t.Roles, Role(r))
		}
	}
	if err := checkSecret(t); err != nil {
		return Token{}, err
	}
	return t, nil
}

// checkSecret refuses a token too short to resist guessing, or with
// white space (which a bearer header would not carry as written).
func checkSecret(t Token) error {
	if len(t.Secret) < 16 {
		return fmt.Errorf("the token of %q must be at least 16 characters", t.Name)
	}
	if strings.ContainsFunc(t.Secret, func(r rune) bool { return r == ' ' || r == '\t' || r == '\n' || r == '\r' }) {
		return fmt.Errorf("the token of %q contains white space", t.Name)
	}
	return nil
}

// CheckTokens checks a set of tokens as New accepts them: each named,
// with known roles and a valid secret, and no name or secret used twice
// (a shared secret would make the recorded name a guess). Every problem
// is reported, by position or name, never by secret.
func CheckTokens(tokens []Token) error {
	var errs []error
	names := map[string]bool{}
	secrets := map[[32]byte]string{}
	for i, t := range tokens {
		if !tokenNamePattern.MatchString(t.Name) {
			errs = append(errs, fmt.Errorf("token %d: the name must be 1-64 characters of A-Z, a-z, 0-9, '.', '_' and '-'", i+1))
			continue
		}
		if len(t.Roles) == 0 || slices.ContainsFunc(t.Roles, func(r Role) bool { return !slices.Contains(Roles, r) }) {
			errs = append(errs, fmt.Errorf("token %q: its roles must be one or more of %s", t.Name, joinRoles(Roles)))
		}
		if err := checkSecret(t); err != nil {
			errs = append(errs, err)
		}
		if names[t.Name] {
			errs = append(errs, fmt.Errorf("two tokens are named %q: the name is what decisions are recorded under", t.Name))
		}
		names[t.Name] = true
		sum := sha256.Sum256([]byte(t.Secret))
		if other, dup := secrets[sum]; dup {
			errs = append(errs, fmt.Errorf("tokens %q and %q have the same token: give each its own", other, t.Name))
		}
		secrets[sum] = t.Name
	}
	return errors.Join(errs...)
}

// apiToken is a Token as the server keeps it: the secret's SHA-256 sum
// (what bearer compares) instead of the secret.
type apiToken struct {
	name  string
	roles []Role
}

type callerKey struct{}

// caller is the token that authenticated the request (set by authed).
func caller(r *http.Request) apiToken {
	t, _ := r.Context().Value(callerKey{}).(apiToken)
	return t
}

// authed requires a valid bearer token holding role: 401 without a valid
// token, 403 when the token lacks the role, before anything is read or
// written. The handler finds the token with caller.
func (s *Server) authed(role Role, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		i, ok := matchBearer(w, r, s.tokenSums, "supportflow")
		if !ok {
			return
		}
		t := s.tokens[i]
		if !slices.Contains(t.roles, role) {
			s.log.Warn("api token lacks the route's role", "token", t.name, "role", string(role), "method", r.Method, "path", r.URL.Path)
			problem(w, http.StatusForbidden, "forbidden", "Forbidden",
				fmt.Sprintf("%s needs the %s role; token %q has %s", r.Pattern, role, t.name, joinRoles(t.roles)))
			return
		}
		h(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, t)))
	}
}
