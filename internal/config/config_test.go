package config

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/api"
	"github.com/supportflow/supportflow/internal/policy"
)

func setAll(t *testing.T) {
	for k, v := range map[string]string{
		"DATABASE_URL": "postgres://u:pw@db/sf", "ZENDESK_URL": "http://zd.test:8080", "ZENDESK_EMAIL": "a@b.test",
		"ZENDESK_API_TOKEN": "zd-secret", "SUBSCRIPTIONS_URL": "http://subs.test", "SUBSCRIPTIONS_TOKEN": "subs-secret",
		"BIGQUERY_PROJECT": "acme-analytics", "BIGQUERY_DATASET": "commerce",
		"SUPPORTFLOW_PAYLOAD_KEYS": testKeys,
	} {
		t.Setenv(k, v)
	}
}

// testKeys is a payload keyring entry (a key made for this test only).
const testKeys = "k1:3q2+7w0yZ0Vc9xL4kQ1rD8uP5sT6vW2aB3cE4fG5hI8="

func TestLoadWorker_Defaults(t *testing.T) {
	setAll(t)
	c, err := LoadWorker()
	require.NoError(t, err)
	assert.Equal(t, "localhost:7233", c.Temporal.Address)
	assert.Equal(t, "supportflow", c.TaskQueue)
	assert.Equal(t, "zd.test:8080", c.Account, "the account defaults to the Zendesk host")
	assert.Equal(t, policy.Defaults(), c.Durations)
	assert.Equal(t, "https://api.openai.com/v1", c.ModelBaseURL)
	assert.Equal(t, "gpt-4o-mini", c.ModelName)
	assert.Empty(t, c.ModelAPIKey, "a local model server needs no key")
	assert.Equal(t, "US", c.BigQueryLocation)
	assert.Equal(t, "shadow", c.EnrichmentMode, "enrichment writes only its own tables unless told otherwise")
	assert.Equal(t, "k1", c.PayloadKeys.ActiveID())
	assert.Len(t, c.Limits, len(policy.Resources))
	for _, r := range policy.Resources {
		assert.Positive(t, c.Limits[r].PerMinute, "every resource has its limits: %s", r)
	}
	assert.Equal(t, ResourceLimit{PerMinute: 200, Concurrency: 8, CallsPerActivity: 3}, c.Limits[policy.ResourceZendesk])
}

// Payloads are sealed or nothing starts: the worker and the API refuse a
// missing or malformed key by the variable's name, never showing a key.
func TestLoad_RequiresPayloadKeys(t *testing.T) {
	setAll(t)
	t.Setenv("SUPPORTFLOW_API_TOKENS", "helpdesk:app:a-token-of-sixteen-chars")
	t.Setenv("ZENDESK_WEBHOOK_SECRET", "s3cret")
	t.Setenv("ZENDESK_API_USER_ID", "900000000001")
	for _, tc := range []struct{ keys, want string }{
		{"", "SUPPORTFLOW_PAYLOAD_KEYS (or SUPPORTFLOW_PAYLOAD_KEYS_FILE) is required"},
		{"k1:c2hvcnQ=", `key "k1" is 5 bytes; AES-256 needs 32`},
		{"k1:%%%notbase64%%%%%%%%%%%%%%%%%%%%%%%%%%%", `key "k1" is not base64`},
	} {
		t.Setenv("SUPPORTFLOW_PAYLOAD_KEYS", tc.keys)
		_, err := LoadWorker()
		require.ErrorIs(t, err, ErrConfig, tc.keys)
		assert.ErrorContains(t, err, tc.want)
		_, err = LoadAPI()
		assert.ErrorContains(t, err, tc.want)
		if tc.keys != "" {
			_, key, _ := strings.Cut(tc.keys, ":")
			assert.NotContains(t, err.Error(), key, "a key is never echoed")
		}
	}
}

func TestLoadWorker_RejectsAnUnknownEnrichmentMode(t *testing.T) {
	setAll(t)
	t.Setenv("SUPPORTFLOW_ENRICHMENT_MODE", "yolo")
	_, err := LoadWorker()
	require.ErrorIs(t, err, ErrConfig)
	assert.ErrorContains(t, err, "SUPPORTFLOW_ENRICHMENT_MODE")
}

func TestLoadWorker_RejectsAModelURLThatIsNotHTTP(t *testing.T) {
	setAll(t)
	t.Setenv("MODEL_BASE_URL", "ftp://model.test/v1")
	_, err := LoadWorker()
	require.ErrorIs(t, err, ErrConfig)
	assert.ErrorContains(t, err, "MODEL_BASE_URL")
}

func TestLoadWorker_ReportsEveryProblemByNameNeverByValue(t *testing.T) {
	setAll(t)
	t.Setenv("ZENDESK_API_TOKEN", "")
	t.Setenv("SUBSCRIPTIONS_URL", "")
	t.Setenv("SUPPORTFLOW_DRAIN_TIMEOUT", "forever")
	t.Setenv("SUPPORTFLOW_RETRY_BASE", "zd-secret")
	_, err := LoadWorker()
	require.ErrorIs(t, err, ErrConfig)
	for _, name := range []string{"ZENDESK_API_TOKEN", "SUBSCRIPTIONS_URL", "SUPPORTFLOW_DRAIN_TIMEOUT", "SUPPORTFLOW_RETRY_BASE"} {
		assert.ErrorContains(t, err, name)
	}
	assert.NotContains(t, err.Error(), "pw@db", "the database URL (with its password) is never echoed")
}

func TestPrintHelp_ListsEveryVariable(t *testing.T) {
	var b bytes.Buffer
	PrintHelp(&b)
	for _, v := range Vars {
		assert.Contains(t, b.String(), v.Name)
	}
	for _, e := range policy.Env {
		assert.Contains(t, b.String(), e.Name)
	}
}

func TestPrintAPIHelp_ListsEveryAPIVariable(t *testing.T) {
	var b bytes.Buffer
	PrintAPIHelp(&b)
	for _, v := range APIVars {
		assert.Contains(t, b.String(), v.Name)
	}
}

// The API refuses to start without its secrets, and reports them by name,
// never by value.
func TestLoadAPI_RequiresTokensAndSecretByName(t *testing.T) {
	t.Setenv("SUPPORTFLOW_PAYLOAD_KEYS", testKeys)
	t.Setenv("DATABASE_URL", "postgres://u:pw@db/sf")
	t.Setenv("ZENDESK_SUBDOMAIN", "acme")
	t.Setenv("SUPPORTFLOW_API_TOKENS", "short")
	t.Setenv("ZENDESK_WEBHOOK_SECRET", "")
	t.Setenv("ZENDESK_API_USER_ID", "")
	t.Setenv("SUPPORTFLOW_WEBHOOK_RETRY_AFTER", "")
	_, err := LoadAPI()
	require.ErrorIs(t, err, ErrConfig)
	assert.ErrorContains(t, err, "SUPPORTFLOW_API_TOKENS")
	assert.ErrorContains(t, err, "ZENDESK_WEBHOOK_SECRET")
	assert.ErrorContains(t, err, "ZENDESK_API_USER_ID")
	assert.NotContains(t, err.Error(), "short", "a token's value is never echoed")

	// A Retry-After Zendesk would not honour (60 s or more) is refused.
	for _, bad := range []string{"60s", "500ms", "soon"} {
		t.Setenv("SUPPORTFLOW_WEBHOOK_RETRY_AFTER", bad)
		_, err = LoadAPI()
		assert.ErrorContains(t, err, "SUPPORTFLOW_WEBHOOK_RETRY_AFTER", bad)
	}
	t.Setenv("SUPPORTFLOW_WEBHOOK_RETRY_AFTER", "")
	t.Setenv("ZENDESK_API_USER_ID", "-3")
	_, err = LoadAPI()
	assert.ErrorContains(t, err, "ZENDESK_API_USER_ID must be a positive integer")

	t.Setenv("SUPPORTFLOW_API_TOKENS", "helpdesk:app:a-token-of-sixteen-chars, alice:approver+operator:another-token-0123456")
	t.Setenv("ZENDESK_WEBHOOK_SECRET", "s3cret")
	t.Setenv("ZENDESK_API_USER_ID", "900000000001")
	c, err := LoadAPI()
	require.NoError(t, err)
	assert.Equal(t, int64(900000000001), c.ZendeskUserID)
	assert.Equal(t, 10*time.Second, c.WebhookRetryAfter, "Zendesk retries a 503 whose Retry-After is under 60 s")
	assert.Equal(t, []api.Token{
		{Name: "helpdesk", Roles: []api.Role{api.RoleApp}, Secret: "a-token-of-sixteen-chars"},
		{Name: "alice", Roles: []api.Role{api.RoleApprover, api.RoleOperator}, Secret: "another-token-0123456"},
	}, c.Tokens)
	assert.Equal(t, "acme", c.Account, "the same account as the worker derives")
	assert.Equal(t, ":8080", c.Addr)
	assert.Empty(t, c.CodecTokens, "no codec server unless tokens are given")

	// The codec server: tokens 16+ characters, origins without paths.
	t.Setenv("SUPPORTFLOW_CODEC_TOKENS", "tiny")
	t.Setenv("SUPPORTFLOW_CODEC_CORS_ORIGINS", "https://temporal.acme.test/ui")
	_, err = LoadAPI()
	assert.ErrorContains(t, err, "SUPPORTFLOW_CODEC_TOKENS")
	assert.ErrorContains(t, err, "SUPPORTFLOW_CODEC_CORS_ORIGINS")
	assert.NotContains(t, err.Error(), "tiny")
	t.Setenv("SUPPORTFLOW_CODEC_TOKENS", "codec-token-0123456789")
	t.Setenv("SUPPORTFLOW_CODEC_CORS_ORIGINS", "https://temporal.acme.test, http://localhost:8233")
	c, err = LoadAPI()
	require.NoError(t, err)
	assert.Equal(t, []string{"codec-token-0123456789"}, c.CodecTokens)
	assert.Equal(t, []string{"https://temporal.acme.test", "http://localhost:8233"}, c.CodecOrigins)
}

// The API's tokens are NAME:ROLE[+ROLE...]:TOKEN, inline or one a line in
// a file. Every malformed entry stops the start with the variable's name
// and the entry's position (and its name once it parsed), never a token.
func TestAPITokens_FormatAndEveryBadInput(t *testing.T) {
	env := func(vars map[string]string) func(string) string { return func(k string) string { return vars[k] } }
	const secret = "s3cret-0123456789abcdef"
	const other = "other-0123456789abcdef"

	got, err := APITokens(env(map[string]string{EnvAPITokens: "helpdesk-app:app:" + secret + " , alice.b_2:approver+operator+approver:" + other + ",ops:operator:with:colons-0123456789"}))
	require.NoError(t, err)
	assert.Equal(t, []api.Token{
		{Name: "helpdesk-app", Roles: []api.Role{api.RoleApp}, Secret: secret},
		{Name: "alice.b_2", Roles: []api.Role{api.RoleApprover, api.RoleOperator}, Secret: other},
		{Name: "ops", Roles: []api.Role{api.RoleOperator}, Secret: "with:colons-0123456789"},
	}, got, "a repeated role counts once; a token may contain ':'")
	assert.NotContains(t, got[0].String(), secret, "a token printed by mistake shows its name, not its secret")

	file := filepath.Join(t.TempDir(), "api-tokens")
	require.NoError(t, os.WriteFile(file, []byte("# the helpdesk\nhelpdesk-app:app:"+secret+"\n\n  # people\nalice:approver:"+other+"\n"), 0o600))
	got, err = APITokens(env(map[string]string{EnvAPITokensFile: file}))
	require.NoError(t, err)
	assert.Equal(t, []string{"helpdesk-app", "alice"}, []string{got[0].Name, got[1].Name})

	long := strings.Repeat("n", 65)
	for _, tc := range []struct {
		name     string
		vars     map[string]string
		want     []string
		notShown string
	}{
		{"nothing set", map[string]string{}, []string{"SUPPORTFLOW_API_TOKENS (or SUPPORTFLOW_API_TOKENS_FILE) is required", "NAME:ROLE"}, ""},
		{"only separators", map[string]string{EnvAPITokens: " , ,"}, []string{"is required"}, ""},
		{"both set", map[string]string{EnvAPITokens: "a:app:" + secret, EnvAPITokensFile: file}, []string{"not both"}, secret},
		{"an unreadable file", map[string]string{EnvAPITokensFile: file + ".missing"}, []string{"SUPPORTFLOW_API_TOKENS_FILE"}, ""},
		{"a bare token from before roles", map[string]string{EnvAPITokens: "a:app:" + other + "," + secret},
			[]string{"SUPPORTFLOW_API_TOKENS entry 2: not NAME:ROLE[+ROLE...]:TOKEN", "helpdesk-app:app:TOKEN", "app+approver+operator"}, secret},
		{"a name but no role", map[string]string{EnvAPITokens: "alice:" + secret}, []string{"entry 1: not NAME:ROLE"}, secret},
		{"an empty name", map[string]string{EnvAPITokens: ":app:" + secret}, []string{"entry 1: the name must be 1-64"}, secret},
		{"a name too long", map[string]string{EnvAPITokens: long + ":app:" + secret}, []string{"entry 1: the name must be 1-64"}, long},
		{"a name with a space", map[string]string{EnvAPITokens: "al ice:app:" + secret}, []string{"entry 1: the name"}, secret},
		{"a name with a slash", map[string]string{EnvAPITokens: "a/b:app:" + secret}, []string{"entry 1: the name"}, secret},
		{"an unknown role", map[string]string{EnvAPITokens: "a:app:" + other + ",bob:admin:" + secret}, []string{"entry 2: a role is empty or unknown", "app+approver+operator"}, secret},
		{"a misspelt role among others", map[string]string{EnvAPITokens: "bob:app+aprover:" + secret}, []string{"entry 1: a role is empty or unknown"}, secret},
		{"an empty role", map[string]string{EnvAPITokens: "bob::" + secret}, []string{"entry 1: a role is empty or unknown"}, secret},
		{"a trailing +", map[string]string{EnvAPITokens: "bob:app+:" + secret}, []string{"entry 1: a role is empty or unknown"}, secret},
		{"an upper-case role", map[string]string{EnvAPITokens: "bob:App:" + secret}, []string{"entry 1: a role is empty or unknown"}, secret},
		{"a token under 16 characters", map[string]string{EnvAPITokens: "a:app:" + secret + ",bob:app:short-0123"},
			[]string{`entry 2: the token of "bob" must be at least 16 characters`}, "short-0123"},
		{"an empty token", map[string]string{EnvAPITokens: "bob:app:"}, []string{`entry 1: the token of "bob" must be at least 16`}, ""},
		{"a token with white space", map[string]string{EnvAPITokensFile: writeTokens(t, "bob:app:two words 0123456789\n")},
			[]string{`line 1: the token of "bob" contains white space`}, "two words"},
		{"a duplicate name", map[string]string{EnvAPITokens: "bob:app:" + secret + ",bob:approver:" + other}, []string{`two tokens are named "bob"`}, secret},
		{"a duplicate token", map[string]string{EnvAPITokens: "bob:app:" + secret + ",carol:approver:" + secret}, []string{`tokens "bob" and "carol" have the same token`}, secret},
		{"a bad line in the file", map[string]string{EnvAPITokensFile: writeTokens(t, "# ok\nbob:app:"+secret+"\n"+secret+"\n")},
			[]string{"SUPPORTFLOW_API_TOKENS_FILE (", "line 3: not NAME:ROLE"}, secret},
		{"every bad entry at once", map[string]string{EnvAPITokens: "bob:nope:" + secret + ",carol:app:short"}, []string{"entry 1: a role", `entry 2: the token of "carol"`}, secret},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := APITokens(env(tc.vars))
			require.ErrorIs(t, err, ErrConfig)
			for _, w := range tc.want {
				assert.ErrorContains(t, err, w)
			}
			assert.Contains(t, err.Error(), "SUPPORTFLOW_API_TOKENS", "the variable is named")
			if tc.notShown != "" {
				assert.NotContains(t, err.Error(), tc.notShown, "a token is never echoed")
			}
		})
	}
}

func writeTokens(t *testing.T, content string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "api-tokens")
	require.NoError(t, os.WriteFile(f, []byte(content), 0o600))
	return f
}

// The reply's ticket update comes from two variables; anything Zendesk
// would not store as given is refused by name.
func TestReplyUpdate(t *testing.T) {
	u, err := ReplyUpdate("", "")
	require.NoError(t, err)
	assert.Nil(t, u, "nothing set: no ticket update")
	u, err = ReplyUpdate("pending", " supportflow , ai_replied ,")
	require.NoError(t, err)
	assert.Equal(t, &supportflow.TicketUpdate{Status: "pending", Tags: []string{"supportflow", "ai_replied"}}, u)
	for _, bad := range [][2]string{{"closed", ""}, {"", "Two Words"}, {"Pending", ""}} {
		_, err := ReplyUpdate(bad[0], bad[1])
		assert.ErrorIs(t, err, ErrConfig, "%v", bad)
		assert.ErrorContains(t, err, "SUPPORTFLOW_REPLY_STATUS", "%v", bad)
	}
}

// Unsealed payloads are refused unless SUPPORTFLOW_ADMIT_UNSEALED_PAYLOADS
// says otherwise, in the worker, the API and the starter alike; a value
// that is not a boolean stops the start by the variable's name.
func TestAdmitUnsealedPayloads(t *testing.T) {
	setAll(t)
	t.Setenv("SUPPORTFLOW_API_TOKENS", "helpdesk:app:a-token-of-sixteen-chars")
	t.Setenv("ZENDESK_WEBHOOK_SECRET", "s3cret")
	t.Setenv("ZENDESK_API_USER_ID", "900000000001")
	for _, unset := range []string{"", "  "} {
		t.Setenv("SUPPORTFLOW_ADMIT_UNSEALED_PAYLOADS", unset)
		w, err := LoadWorker()
		require.NoError(t, err)
		assert.False(t, w.AdmitUnsealedPayloads, "refused by default")
		a, err := LoadAPI()
		require.NoError(t, err)
		assert.False(t, a.AdmitUnsealedPayloads)
		admit, err := AdmitUnsealedPayloads()
		require.NoError(t, err)
		assert.False(t, admit)
	}
	for v, want := range map[string]bool{"true": true, "TRUE": true, "1": true, " true ": true, "false": false, "0": false} {
		t.Setenv("SUPPORTFLOW_ADMIT_UNSEALED_PAYLOADS", v)
		w, err := LoadWorker()
		require.NoError(t, err, v)
		assert.Equal(t, want, w.AdmitUnsealedPayloads, v)
		a, err := LoadAPI()
		require.NoError(t, err, v)
		assert.Equal(t, want, a.AdmitUnsealedPayloads, v)
		admit, err := AdmitUnsealedPayloads()
		require.NoError(t, err, v)
		assert.Equal(t, want, admit, v)
	}
	for _, bad := range []string{"yes", "on", "maybe", "2"} {
		t.Setenv("SUPPORTFLOW_ADMIT_UNSEALED_PAYLOADS", bad)
		_, err := LoadWorker()
		require.ErrorIs(t, err, ErrConfig, bad)
		assert.ErrorContains(t, err, "SUPPORTFLOW_ADMIT_UNSEALED_PAYLOADS must be true or false", bad)
		_, err = LoadAPI()
		assert.ErrorContains(t, err, "SUPPORTFLOW_ADMIT_UNSEALED_PAYLOADS must be true or false", bad)
		_, err = AdmitUnsealedPayloads()
		assert.ErrorIs(t, err, ErrConfig, bad)
	}
}

// The codec server only decodes unless SUPPORTFLOW_CODEC_ALLOW_ENCODE is
// true; a value that is not a boolean stops the API by name.
func TestLoadAPI_CodecAllowEncode(t *testing.T) {
	setAll(t)
	t.Setenv("SUPPORTFLOW_API_TOKENS", "helpdesk:app:a-token-of-sixteen-chars")
	t.Setenv("ZENDESK_WEBHOOK_SECRET", "s3cret")
	t.Setenv("ZENDESK_API_USER_ID", "900000000001")
	t.Setenv("SUPPORTFLOW_CODEC_TOKENS", "codec-token-0123456789")
	t.Setenv("SUPPORTFLOW_CODEC_ALLOW_ENCODE", "")
	c, err := LoadAPI()
	require.NoError(t, err)
	assert.False(t, c.CodecAllowEncode, "decode only by default")
	for v, want := range map[string]bool{"true": true, "True": true, "1": true, "false": false, "0": false} {
		t.Setenv("SUPPORTFLOW_CODEC_ALLOW_ENCODE", v)
		c, err := LoadAPI()
		require.NoError(t, err, v)
		assert.Equal(t, want, c.CodecAllowEncode, v)
	}
	for _, bad := range []string{"yes", "enabled", "-1"} {
		t.Setenv("SUPPORTFLOW_CODEC_ALLOW_ENCODE", bad)
		_, err := LoadAPI()
		require.ErrorIs(t, err, ErrConfig, bad)
		assert.ErrorContains(t, err, "SUPPORTFLOW_CODEC_ALLOW_ENCODE must be true or false", bad)
	}
}

// Both settings are documented where --help prints: the unsealed switch
// with the worker's variables (the API and starter share it), encoding
// with the API's, each defaulting to false.
func TestPrintHelp_DocumentsTheStrictnessSettings(t *testing.T) {
	find := func(vars []Var, name string) Var {
		for _, v := range vars {
			if v.Name == name {
				return v
			}
		}
		t.Fatalf("%s is not documented", name)
		return Var{}
	}
	admit := find(Vars, "SUPPORTFLOW_ADMIT_UNSEALED_PAYLOADS")
	assert.Equal(t, "false", admit.Default)
	assert.NotContains(t, admit.Help, "required", "optional: compose's tests require every variable whose help says required")
	encode := find(APIVars, "SUPPORTFLOW_CODEC_ALLOW_ENCODE")
	assert.Equal(t, "false", encode.Default)
	assert.NotContains(t, encode.Help, "required")
}

// A secret comes from NAME or from the file NAME_FILE names; each bad
// input is refused naming the variable, never the value.
func TestSecretEnv(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(file, []byte("s3cret-from-file\n"), 0o600))
	empty := filepath.Join(dir, "empty")
	require.NoError(t, os.WriteFile(empty, []byte("\n"), 0o600))

	t.Setenv("ZENDESK_API_TOKEN", "inline")
	v, err := SecretEnv("ZENDESK_API_TOKEN")
	require.NoError(t, err)
	assert.Equal(t, "inline", v)

	t.Setenv("ZENDESK_API_TOKEN", "")
	t.Setenv("ZENDESK_API_TOKEN_FILE", file)
	v, err = SecretEnv("ZENDESK_API_TOKEN")
	require.NoError(t, err)
	assert.Equal(t, "s3cret-from-file", v, "the trailing newline is dropped")

	for name, tc := range map[string]struct{ inline, path, want string }{
		"both":    {"inline", file, "not both"},
		"missing": {"", filepath.Join(dir, "nope"), "cannot read"},
		"empty":   {"", empty, "empty"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv("ZENDESK_API_TOKEN", tc.inline)
			t.Setenv("ZENDESK_API_TOKEN_FILE", tc.path)
			_, err := SecretEnv("ZENDESK_API_TOKEN")
			require.ErrorIs(t, err, ErrConfig)
			assert.Contains(t, err.Error(), "ZENDESK_API_TOKEN_FILE")
			assert.Contains(t, err.Error(), tc.want)
			assert.NotContains(t, err.Error(), "s3cret")
			assert.NotContains(t, err.Error(), "inline")
		})
	}
}
