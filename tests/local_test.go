package tests

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/testenv"
)

// startsItsOwnServers skips a test that brings up its own PostgreSQL and
// dev server (the local run, the bench) when the suite runs against
// another Temporal: it would measure nothing of that topology, and it
// already ran in the dev-server pass.
func startsItsOwnServers(t *testing.T) {
	t.Helper()
	if os.Getenv("TEMPORAL_ADDRESS") != "" || testenv.Topology() != "dev" {
		t.Skip("starts its own servers; runs in the dev-server pass (TEMPORAL_ADDRESS or SUPPORTFLOW_TEST_TEMPORAL is set)")
	}
}

// localEnv is the environment a new user has: none of the services'
// settings and none of the local run's own, so the local run brings up its
// own servers; free ports for everything it binds, so tests can run side by
// side.
func localEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		switch strings.SplitN(kv, "=", 2)[0] {
		case "DATABASE_URL", "TEMPORAL_ADDRESS", "ZENDESK_URL", "ZENDESK_SUBDOMAIN", "SUBSCRIPTIONS_URL", "MODEL_BASE_URL",
			"BIGQUERY_PROJECT", "SUPPORTFLOW_API_TOKENS", "SUPPORTFLOW_API_TOKENS_FILE", "ZENDESK_WEBHOOK_SECRET", "SUPPORTFLOW_API_ADDR", "SUPPORTFLOW_METRICS_ADDR",
			"SUPPORTFLOW_ACCOUNT", "SUPPORTFLOW_PAYLOAD_KEYS", "SUPPORTFLOW_PAYLOAD_KEYS_FILE":
			continue
		}
		if strings.HasPrefix(kv, "SUPPORTFLOW_LOCAL_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, append([]string{"SUPPORTFLOW_API_ADDR=127.0.0.1:0", "SUPPORTFLOW_METRICS_ADDR=127.0.0.1:0",
		"SUPPORTFLOW_LOCAL_TEMPORAL_PORT=0", "SUPPORTFLOW_LOCAL_TEMPORAL_UI_PORT=0", "SUPPORTFLOW_LOCAL_POSTGRES_PORT=0"}, extra...)...)
}

// The README's run command, as a new user runs it, in its -once mode: it
// starts its own PostgreSQL and dev server, the stand-ins, the worker and
// the API, drives the demo tickets through webhook -> enrichment -> draft,
// approves one, and checks exactly one comment and one cancellation per
// subscription landed.
func TestLocalRun_DemoProposalIsApplied(t *testing.T) {
	startsItsOwnServers(t)
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "run", "github.com/supportflow/supportflow/cmd/local", "-once", "-state", localStateDir(t))
	cmd.Env = localEnv()
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "demo draft approved and applied: 1 comment, 2 cancellations")
	assert.Contains(t, string(out), "==> ready")
	assert.Contains(t, string(out), "Temporal Web UI: http://127.0.0.1:")
	assert.Contains(t, string(out), "SupportflowTicketID", "the Web UI link is filtered to the demo tickets")
	assert.Contains(t, string(out), "==> stopped cleanly")
}

// localRun is the local run as a user leaves it running.
type localRun struct {
	cmd      *exec.Cmd
	exited   chan error
	stateDir string
	output   func() string
}

// localBinary builds the local run once per test binary.
var localBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "sf-local-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "local")
	build := exec.Command("go", "build", "-o", bin, "github.com/supportflow/supportflow/cmd/local")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/local: %w\n%s", err, out)
	}
	return bin, nil
})

func buildLocal(t *testing.T) string {
	t.Helper()
	bin, err := localBinary()
	require.NoError(t, err)
	return bin
}

// startLocalRun builds and starts the local run and waits until it is
// ready (its demo drafts awaiting approval); it is killed at cleanup.
func startLocalRun(t *testing.T, env ...string) *localRun {
	t.Helper()
	return startLocalRunIn(t, localStateDir(t), nil, env...)
}

// localStateDir is a state directory for the local run that the postgres
// OS user can reach when the tests run as root (t.TempDir's parent is
// closed to other users), so PostgreSQL's data stays inside it.
func localStateDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.Chmod(filepath.Dir(dir), 0o755))
	require.NoError(t, os.Chmod(dir, 0o755))
	return dir
}

// startLocalRunIn is startLocalRun on the state directory stateDir, with
// extra flags.
func startLocalRunIn(t *testing.T, stateDir string, args []string, env ...string) *localRun {
	t.Helper()
	bin := buildLocal(t)
	lr := &localRun{stateDir: stateDir, exited: make(chan error, 1)}
	cmd := exec.Command(bin, append([]string{"-state", lr.stateDir}, args...)...)
	lr.cmd = cmd
	cmd.Env = localEnv(env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = cmd.Stdout
	require.NoError(t, cmd.Start())
	var mu sync.Mutex
	var lines []string
	readyCh := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		once := sync.Once{}
		for sc.Scan() {
			mu.Lock()
			lines = append(lines, sc.Text())
			mu.Unlock()
			if strings.Contains(sc.Text(), "==> press Ctrl-C to stop") {
				once.Do(func() { close(readyCh) })
			}
		}
		lr.exited <- cmd.Wait()
	}()
	lr.output = func() string { mu.Lock(); defer mu.Unlock(); return strings.Join(lines, "\n") }
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("local run output:\n%s", lr.output())
		}
	})
	select {
	case <-readyCh:
	case err := <-lr.exited:
		t.Fatalf("the local run exited before ready: %v", err)
	case <-time.After(4 * time.Minute):
		t.Fatal("the local run never reached ready")
	}
	return lr
}

// httpDo sends a request, with the bearer token unless it is "", and
// returns the answer's status and body.
func httpDo(t *testing.T, method, u, token, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// approveAndWait approves a demo proposal over the local run's API, as
// the printed curl does, and waits until its draft is done.
func approveAndWait(t *testing.T, apiURL, token, ticket, proposal, by string) {
	t.Helper()
	code, b := httpDo(t, "POST", apiURL+"/proposals/"+proposal+"/approve", token, `{"approved_by":"`+by+`"}`)
	require.Equal(t, http.StatusOK, code, string(b))
	require.Eventually(t, func() bool {
		code, body := httpDo(t, "GET", fmt.Sprintf("%s/tickets/%s/draft", apiURL, ticket), token, "")
		var st supportflow.DraftStatus
		return code == 200 && json.Unmarshal(body, &st) == nil && st.State == supportflow.DraftDone
	}, time.Minute, 100*time.Millisecond, "the approved draft finished")
}

var (
	reAPI      = regexp.MustCompile(`==> api: (http://\S+)`)
	reToken    = regexp.MustCompile(`==> api token: (\S+)`)
	reMetrics  = regexp.MustCompile(`==> metrics: (http://\S+)`)
	reProposal = regexp.MustCompile(`==> ticket (\d+): proposal (\S+) awaits approval`)
)

// The local run as a user leaves it running: it reaches ready with the
// demo drafts awaiting approval; one is approved over the HTTP API with
// the printed token and command; /metrics shows Temporal's and
// supportflow's metrics; SIGINT stops it cleanly within the drain timeout.
func TestLocalRun_InteractiveApproveMetricsAndSIGINT(t *testing.T) {
	startsItsOwnServers(t)
	t.Parallel()
	const drain = 5 * time.Second
	lr := startLocalRun(t, "SUPPORTFLOW_DRAIN_TIMEOUT="+drain.String())
	cmd, exited, output := lr.cmd, lr.exited, lr.output
	out := output()
	apiURL, token, metricsURL := reAPI.FindStringSubmatch(out), reToken.FindStringSubmatch(out), reMetrics.FindStringSubmatch(out)
	require.NotNil(t, apiURL, out)
	require.NotNil(t, token, out)
	require.NotNil(t, metricsURL, out)
	props := reProposal.FindAllStringSubmatch(out, -1)
	require.Len(t, props, 3, "three demo drafts await approval")
	assert.Contains(t, out, "approve: curl -s -X POST -H \"Authorization: Bearer "+token[1]+`"`)

	ticket, proposal := props[0][1], props[0][2]
	approveAndWait(t, apiURL[1], token[1], ticket, proposal, "test")
	code, body := httpDo(t, "GET", fmt.Sprintf("%s/actions/%s", apiURL[1], supportflow.ActionKey(proposal, 0)), token[1], "")
	require.Equal(t, 200, code, string(body))
	assert.Contains(t, string(body), `"state":"applied"`)

	code, b := httpDo(t, "GET", metricsURL[1], "", "")
	require.Equal(t, 200, code)
	metrics := string(b)
	for _, want := range []string{
		`supportflow_action_legs_total{leg="zendesk",outcome="posted"} 1`,
		`supportflow_action_legs_total{leg="cancellations",outcome="cancelled"} 1`,
		`supportflow_enrichment_lookups_total{outcome="found"} 3`,
		`supportflow_drafts_total{outcome="generated"} 3`,
		"temporal_request",
		"temporal_workflow_completed",
	} {
		assert.Contains(t, metrics, want)
	}

	stopped := time.Now()
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	select {
	case err := <-exited:
		require.NoError(t, err, "a clean exit")
	case <-time.After(drain + 20*time.Second):
		t.Fatal("the local run did not stop within the drain timeout")
	}
	t.Logf("stopped in %s", time.Since(stopped).Round(time.Millisecond))
	assert.Contains(t, output(), "==> stopped cleanly")
}

// chromium finds a Chromium (or Chrome) to drive headless:
// SUPPORTFLOW_CHROMIUM, else the usual names on PATH.
func chromium() (string, bool) {
	if p := os.Getenv("SUPPORTFLOW_CHROMIUM"); p != "" {
		return p, true
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, true
		}
	}
	return "", false
}

var (
	reWebUI = regexp.MustCompile(`==> Temporal Web UI: (http://[^/\s]+)`)
	reReply = regexp.MustCompile(`==> ticket \d+: proposal \S+ awaits approval: "(Hi [A-Za-z]+, thanks for writing)`)
)

// The Web UI the local run starts, opened headless in Chromium as an
// operator opens it, shows an approved execution's input (the reply to the
// customer, by name) in the clear, decoded through the codec server, while
// the history the Temporal server returns holds it only sealed.
func TestPII_WebUIRendersDecodedPayload(t *testing.T) {
	browser, ok := chromium()
	if !ok {
		t.Skip("Chromium is not installed (Debian: apt-get install chromium; .ci/run installs it), or set SUPPORTFLOW_CHROMIUM")
	}
	startsItsOwnServers(t)
	t.Parallel()
	lr := startLocalRun(t)
	out := lr.output()
	apiURL, token, ui := reAPI.FindStringSubmatch(out), reToken.FindStringSubmatch(out), reWebUI.FindStringSubmatch(out)
	props, reply := reProposal.FindStringSubmatch(out), reReply.FindStringSubmatch(out)
	require.NotNil(t, apiURL, out)
	require.NotNil(t, token, out)
	require.NotNil(t, ui, out)
	require.NotNil(t, props, out)
	require.NotNil(t, reply, out)
	ticket, proposal := props[1], props[2]

	approveAndWait(t, apiURL[1], token[1], ticket, proposal, "webui-test")
	getJSON := func(u string, v any) int {
		code, b := httpDo(t, "GET", u, "", "")
		_ = json.Unmarshal(b, v)
		return code
	}

	// The execution's run, and its history as the server holds it (through
	// the Web UI's own HTTP API, which the browser reads too).
	wf := ui[1] + "/api/v1/namespaces/default/workflows/" + url.PathEscape(supportflow.ExecuteWorkflowID(proposal))
	var desc struct {
		WorkflowExecutionInfo struct {
			Execution struct {
				RunID string `json:"runId"`
			} `json:"execution"`
		} `json:"workflowExecutionInfo"`
	}
	require.Equal(t, 200, getJSON(wf, &desc))
	run := desc.WorkflowExecutionInfo.Execution.RunID
	require.NotEmpty(t, run)
	var history any
	require.Equal(t, 200, getJSON(wf+"/history?execution.runId="+run, &history))
	// Payload data is base64 in the JSON: decode every "data" before
	// looking for the reply, and read every payload's encoding.
	var stored strings.Builder
	encodings := map[string]int{}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if d, ok := v["data"].(string); ok {
				b, _ := base64.StdEncoding.DecodeString(d)
				stored.Write(b)
				if md, ok := v["metadata"].(map[string]any); ok {
					enc, _ := md["encoding"].(string)
					e, _ := base64.StdEncoding.DecodeString(enc)
					encodings[string(e)]++
				}
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(history)
	assert.Positive(t, encodings["binary/encrypted"], "the history's payloads: %v", encodings)
	assert.NotContains(t, stored.String(), reply[1], "the server holds the reply sealed")

	page := fmt.Sprintf("%s/namespaces/default/workflows/%s/%s/history", ui[1], url.PathEscape(supportflow.ExecuteWorkflowID(proposal)), run)
	var dom string
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
			"--user-data-dir="+t.TempDir(), "--virtual-time-budget=20000", "--dump-dom", page)
		b, err := cmd.Output()
		dom = string(b)
		return err == nil && strings.Contains(dom, reply[1])
	}, 3*time.Minute, time.Second, "the Web UI at %s shows the decoded reply %q", page, reply[1])

	logs, err := os.ReadFile(filepath.Join(lr.stateDir, "local.log"))
	require.NoError(t, err)
	assert.Regexp(t, `"msg":"codec request","path":"/codec/decode".*"origin":"`+regexp.QuoteMeta(ui[1])+`"`, string(logs),
		"the browser decoded through the API's codec server")
}

// stop sends SIGINT, as Ctrl-C does, and waits for a clean exit.
func (lr *localRun) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, lr.cmd.Process.Signal(syscall.SIGINT))
	select {
	case err := <-lr.exited:
		require.NoError(t, err, "a clean exit")
	case <-time.After(2 * time.Minute):
		t.Fatal("the local run did not stop within 2 minutes of SIGINT")
	}
	require.Contains(t, lr.output(), "==> stopped cleanly")
}

// runLocalOnce runs the local run in its -once mode on stateDir and
// returns its output.
func runLocalOnce(t *testing.T, stateDir string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, buildLocal(t), append([]string{"-once", "-state", stateDir}, args...)...)
	cmd.Env = localEnv()
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	return string(out)
}

// draftOf reads a ticket's draft over the API.
func draftOf(t *testing.T, apiURL, token, ticket string) (int, supportflow.DraftStatus) {
	t.Helper()
	code, body := httpDo(t, "GET", fmt.Sprintf("%s/tickets/%s/draft", apiURL, ticket), token, "")
	var st supportflow.DraftStatus
	if code == http.StatusOK {
		require.NoError(t, json.Unmarshal(body, &st), "%s", body)
	}
	return code, st
}

// Stopped (SIGINT) and started again on the same state directory, the
// local run keeps both halves of every draft: each draft the first run
// listed as awaiting approval is listed again by the second, the API shows
// it awaiting approval with the same proposal, and approving one executes
// it to the end (its reply action applied). None is an orphan known to one
// half only.
func TestLocal_RestartKeepsDraftsWhole(t *testing.T) {
	startsItsOwnServers(t)
	t.Parallel()
	state := localStateDir(t)

	first := startLocalRunIn(t, state, nil)
	out1 := first.output()
	listed := reProposal.FindAllStringSubmatch(out1, -1)
	require.Len(t, listed, 3, "the first run lists the three demo drafts")
	first.stop(t)

	second := startLocalRunIn(t, state, nil)
	defer second.stop(t)
	out2 := second.output()
	require.Contains(t, out2, "==> keeping the state in ")
	require.Contains(t, out2, "==> kept from the last run: 3 tickets")
	apiURL, token := reAPI.FindStringSubmatch(out2), reToken.FindStringSubmatch(out2)
	require.NotNil(t, apiURL, out2)
	require.NotNil(t, token, out2)
	relisted := map[string]string{}
	for _, m := range reProposal.FindAllStringSubmatch(out2, -1) {
		relisted[m[1]] = m[2]
	}
	for _, m := range listed {
		ticket, proposal := m[1], m[2]
		assert.Equal(t, proposal, relisted[ticket], "ticket %s's draft is listed again after the restart", ticket)
		code, st := draftOf(t, apiURL[1], token[1], ticket)
		require.Equal(t, http.StatusOK, code, "ticket %s's draft is known to the API after the restart", ticket)
		assert.Equal(t, supportflow.DraftAwaitingApproval, st.State, "ticket %s", ticket)
		require.NotNil(t, st.Proposal, "ticket %s", ticket)
		assert.Equal(t, proposal, st.Proposal.ID, "ticket %s", ticket)
	}

	// The first listed draft proposes two cancellations and a reply:
	// approving it after the restart executes it to the end.
	ticket, proposal := listed[0][1], listed[0][2]
	approveAndWait(t, apiURL[1], token[1], ticket, proposal, "restart-test")
	code, body := httpDo(t, "GET", fmt.Sprintf("%s/actions/%s", apiURL[1], supportflow.ActionKey(proposal, 0)), token[1], "")
	require.Equal(t, http.StatusOK, code, "%s", body)
	assert.Contains(t, string(body), `"state":"applied"`)
}

// A port the local run needs that is already taken stops it at once, with
// an error naming the port, what needed it and the setting that moves it,
// before anything was started.
func TestLocal_PortInUseNamesTheSetting(t *testing.T) {
	startsItsOwnServers(t)
	t.Parallel()
	bin := buildLocal(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	addr := taken.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	for _, c := range []struct{ env, want string }{
		{"SUPPORTFLOW_API_ADDR=" + addr, "SUPPORTFLOW_API_ADDR"},
		{"SUPPORTFLOW_METRICS_ADDR=" + addr, "SUPPORTFLOW_METRICS_ADDR"},
		{"SUPPORTFLOW_LOCAL_TEMPORAL_PORT=" + port, "SUPPORTFLOW_LOCAL_TEMPORAL_PORT"},
		{"SUPPORTFLOW_LOCAL_TEMPORAL_UI_PORT=" + port, "SUPPORTFLOW_LOCAL_TEMPORAL_UI_PORT"},
		{"SUPPORTFLOW_LOCAL_POSTGRES_PORT=" + port, "SUPPORTFLOW_LOCAL_POSTGRES_PORT"},
		{"SUPPORTFLOW_LOCAL_STANDINS_PORT=" + port, "SUPPORTFLOW_LOCAL_STANDINS_PORT"},
	} {
		t.Run(c.want, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			state := t.TempDir()
			cmd := exec.CommandContext(ctx, bin, "-state", state)
			cmd.Env = localEnv(c.env)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "%s", out)
			assert.Equal(t, 1, exit.ExitCode(), "%s", out)
			assert.Regexp(t, `local: .*127\.0\.0\.1:`+port+`: the port is already in use .*`+c.want+`=`, string(out))
			assert.NotContains(t, string(out), "==> starting", "nothing was started")
			_, err = os.Stat(filepath.Join(state, "postgres"))
			assert.ErrorIs(t, err, os.ErrNotExist, "no state was created")
		})
	}
}

// The state is kept or started fresh as a whole: -fresh (or
// SUPPORTFLOW_LOCAL_FRESH=1) removes both halves, and a half that is
// missing makes the run start both fresh, saying so; neither lists a draft
// of the run before.
func TestLocal_FreshSwitchStartsBothHalvesFresh(t *testing.T) {
	startsItsOwnServers(t)
	t.Parallel()
	state := localStateDir(t)
	out := runLocalOnce(t, state)
	assert.Contains(t, out, "==> new state in ")
	first := reProposal.FindAllStringSubmatch(out, -1)
	require.Len(t, first, 3, out)

	// The Temporal history goes missing: PostgreSQL's data must not be
	// kept without it.
	require.NoError(t, os.Remove(filepath.Join(state, "temporal.db")))
	out = runLocalOnce(t, state)
	assert.Regexp(t, `==> the Temporal history \(temporal\.db\) missing while PostgreSQL's data \(postgres/\).* kept: starting both fresh`, out)
	assert.NotContains(t, out, "kept from the last run")
	for _, m := range first {
		assert.NotContains(t, out, "proposal "+m[2], "a draft of the run before is not listed")
	}
	second := reProposal.FindAllStringSubmatch(out, -1)
	require.Len(t, second, 3, out)

	// -fresh removes both although both are there: the drafts of the run
	// before are unknown to the API after it.
	fresh := startLocalRunIn(t, state, []string{"-fresh"})
	defer fresh.stop(t)
	out = fresh.output()
	assert.Contains(t, out, "==> starting fresh (-fresh): removing the kept state in ")
	assert.NotContains(t, out, "kept from the last run")
	apiURL, token := reAPI.FindStringSubmatch(out), reToken.FindStringSubmatch(out)
	require.NotNil(t, apiURL, out)
	require.NotNil(t, token, out)
	for _, m := range second {
		assert.NotContains(t, out, "proposal "+m[2], "a draft of the run before is not listed")
		code, _ := draftOf(t, apiURL[1], token[1], m[1])
		assert.Equal(t, http.StatusNotFound, code, "ticket %s's draft of the run before is unknown after -fresh", m[1])
		code, body := httpDo(t, "GET", apiURL[1]+"/proposals/"+m[2], token[1], "")
		assert.Equal(t, http.StatusNotFound, code, "proposal %s of the run before is unknown after -fresh: %s", m[2], body)
	}
}

// A second local run on a state directory in use is refused, naming the
// directory, and removes nothing: the first run's drafts can still be
// approved, and its kept files are all there.
func TestLocal_SecondRunOnSameStateIsRefused(t *testing.T) {
	startsItsOwnServers(t)
	t.Parallel()
	state := localStateDir(t)
	first := startLocalRunIn(t, state, nil)
	defer first.stop(t)
	out := first.output()
	apiURL, token := reAPI.FindStringSubmatch(out), reToken.FindStringSubmatch(out)
	require.NotNil(t, apiURL, out)
	require.NotNil(t, token, out)
	props := reProposal.FindAllStringSubmatch(out, -1)
	require.Len(t, props, 3, out)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, buildLocal(t), "-state", state)
	cmd.Env = localEnv()
	b, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "%s", b)
	assert.Equal(t, 1, exit.ExitCode(), "%s", b)
	assert.Contains(t, string(b), "local: another local run is using the state directory "+state)
	assert.NotContains(t, string(b), "==> starting", "nothing was started")
	for _, f := range []string{"temporal.db", "standins.json", "state.json", filepath.Join("postgres", "PG_VERSION")} {
		_, err := os.Stat(filepath.Join(state, f))
		assert.NoError(t, err, "%s is kept", f)
	}
	approveAndWait(t, apiURL[1], token[1], props[0][1], props[0][2], "second-run-test")
}

// Switching a half between the run's own server and the user's
// (TEMPORAL_ADDRESS) starts both halves fresh, saying why: the run's own
// history is not kept beside PostgreSQL data that no longer matches it.
func TestLocal_SwitchingAHalfStartsFresh(t *testing.T) {
	startsItsOwnServers(t)
	t.Parallel()
	state := localStateDir(t)
	out := runLocalOnce(t, state)
	require.Len(t, reProposal.FindAllStringSubmatch(out, -1), 3, out)
	_, err := os.Stat(filepath.Join(state, "temporal.db"))
	require.NoError(t, err)

	// The same state with a Temporal of the user's: it decides before it
	// starts anything, so it is stopped once PostgreSQL starts.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, buildLocal(t), "-state", state)
	cmd.Env = localEnv("TEMPORAL_ADDRESS=127.0.0.1:1")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = cmd.Stdout
	require.NoError(t, cmd.Start())
	var lines []string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if strings.Contains(sc.Text(), "==> starting PostgreSQL") {
			break
		}
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	out = strings.Join(lines, "\n")
	assert.Contains(t, out, "==> Temporal (TEMPORAL_ADDRESS) changed since the state was kept: starting both halves fresh")
	_, err = os.Stat(filepath.Join(state, "temporal.db"))
	assert.ErrorIs(t, err, os.ErrNotExist, "the run's own history is not kept beside another Temporal")

	// Back to its own servers: the state was the user's Temporal's, so
	// both start fresh again and no draft of the first run is listed.
	out = runLocalOnce(t, state)
	assert.Contains(t, out, "==> Temporal (TEMPORAL_ADDRESS) changed since the state was kept: starting both halves fresh")
	assert.NotContains(t, out, "kept from the last run")
}
