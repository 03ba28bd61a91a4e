package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/supportflow/supportflow/internal/api"
	"github.com/supportflow/supportflow/internal/standin"
	"github.com/supportflow/supportflow/internal/testenv"
)

// The shrunk HTTP settings TestAPI_TimeoutsAndStreamCaps runs the servers
// with (SUPPORTFLOW_HTTP_*, SUPPORTFLOW_API_*). The idle timeout is the
// longest, so a connection closed after it was not closed by a read
// timeout.
const (
	httpReadHeaderTimeout = 1 * time.Second
	httpReadTimeout       = 2 * time.Second
	httpWriteTimeout      = 1 * time.Second
	httpIdleTimeout       = 3 * time.Second
	sseKeepAlive          = 200 * time.Millisecond
	maxStreamsPerToken    = 2
	// closeBudget is how long a test waits for a server to close a
	// connection: far beyond every timeout, for a loaded machine.
	closeBudget = 45 * time.Second
)

// httpProcess is a `supportflow-api` or `codec-gateway` process and the
// addresses it logged.
type httpProcess struct {
	cmd    *exec.Cmd
	exited chan struct{}
	mu     sync.Mutex
	logs   bytes.Buffer
	addrs  map[string]chan string // by log message
}

// startHTTPProcess runs the program bin with env, and waits for it to log
// each of the messages in want with an "addr" field.
func startHTTPProcess(t *testing.T, bin string, env []string, want ...string) map[string]string {
	t.Helper()
	p := &httpProcess{exited: make(chan struct{}), addrs: map[string]chan string{}}
	for _, msg := range want {
		p.addrs[msg] = make(chan string, 1)
	}
	p.cmd = exec.Command(bin)
	p.cmd.Env = append(os.Environ(), env...)
	r, w := io.Pipe()
	p.cmd.Stdout, p.cmd.Stderr = w, w
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, p.cmd.Start())
	go func() { _ = p.cmd.Wait(); w.Close(); close(p.exited) }()
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.logs.WriteString(line + "\n")
			p.mu.Unlock()
			var entry struct{ Msg, Addr string }
			if json.Unmarshal([]byte(line), &entry) == nil && entry.Addr != "" {
				if ch, ok := p.addrs[entry.Msg]; ok {
					select {
					case ch <- entry.Addr:
					default:
					}
				}
			}
		}
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			p.mu.Lock()
			t.Logf("%s logs:\n%s", filepath.Base(bin), p.logs.String())
			p.mu.Unlock()
		}
	})
	got := map[string]string{}
	for _, msg := range want {
		select {
		case addr := <-p.addrs[msg]:
			got[msg] = addr
		case <-p.exited:
			p.mu.Lock()
			defer p.mu.Unlock()
			t.Fatalf("%s exited before logging %q:\n%s", filepath.Base(bin), msg, p.logs.String())
		case <-time.After(waitBudget):
			t.Fatalf("%s never logged %q", filepath.Base(bin), msg)
		}
	}
	return got
}

// loopback turns a logged listening address into one to dial.
func loopback(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return net.JoinHostPort("127.0.0.1", port)
}

// waitClosedByServer reads conn until the server closes it, and returns
// how long that took from since, and what was read. It fails the test if
// the server has not closed it within closeBudget.
func waitClosedByServer(t *testing.T, conn net.Conn, since time.Time) (time.Duration, []byte) {
	t.Helper()
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(closeBudget)))
	var got []byte
	buf := make([]byte, 4096)
	for {
		n, err := conn.Read(buf)
		got = append(got, buf[:n]...)
		if err == nil {
			continue
		}
		var ne net.Error
		require.False(t, errors.As(err, &ne) && ne.Timeout(), "the server has not closed the connection after %s", closeBudget)
		// io.EOF, or a reset: closed by the server.
		return time.Since(since), got
	}
}

// sseStream is an open event stream and the lines it delivered, each with
// when it arrived.
type sseStream struct {
	cancel context.CancelFunc
	opened time.Time
	mu     sync.Mutex
	lines  []sseLine
	ended  chan struct{}
}

type sseLine struct {
	at   time.Time
	text string
}

func (s *sseStream) snapshot() []sseLine {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sseLine(nil), s.lines...)
}

// openStream requests the ticket's event stream with token: a stream
// (status 200), or the refusal's status, headers and body.
func openStream(t *testing.T, base string, ticket int64, token string) (*sseStream, *http.Response, []byte) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/tickets/%d/draft/events", base, ticket), nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		return nil, resp, body
	}
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	s := &sseStream{cancel: cancel, opened: time.Now(), ended: make(chan struct{})}
	go func() {
		defer close(s.ended)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if sc.Text() == "" {
				continue
			}
			s.mu.Lock()
			s.lines = append(s.lines, sseLine{at: time.Now(), text: sc.Text()})
			s.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); <-s.ended })
	return s, resp, nil
}

// Every HTTP server supportflow runs (the API, its metrics endpoint, the
// codec gateway), run as the product runs them (`supportflow-api`, `worker
// codec-gateway`) with shrunk SUPPORTFLOW_HTTP_* timeouts:
//
//   - a keep-alive connection left idle is closed by the server, no sooner
//     than the idle timeout;
//   - a client trickling its request headers, never ending them, is cut
//     off after the header timeout, on every server; one trickling a body
//     is cut off after the read timeout;
//   - an event stream lives on well past the write timeout, still
//     delivering (keep-alive comments; the draft, with no worker running,
//     does not change);
//   - a token holds at most SUPPORTFLOW_API_MAX_STREAMS_PER_TOKEN streams:
//     the next is 429 with a Retry-After and a problem+json body, while
//     another token's stream is admitted, and closing one of the first
//     token's streams admits a new one.
func TestAPI_TimeoutsAndStreamCaps(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	// No worker runs: the draft stays gathering, and its stream open.
	ticket := s.seedTicket("Where is my order?")
	_, err := s.starter.StartDraft(ctxT(t), ticket, "click")
	require.NoError(t, err)

	httpEnv := []string{
		"SUPPORTFLOW_HTTP_READ_HEADER_TIMEOUT=" + httpReadHeaderTimeout.String(),
		"SUPPORTFLOW_HTTP_READ_TIMEOUT=" + httpReadTimeout.String(),
		"SUPPORTFLOW_HTTP_WRITE_TIMEOUT=" + httpWriteTimeout.String(),
		"SUPPORTFLOW_HTTP_IDLE_TIMEOUT=" + httpIdleTimeout.String(),
		"SUPPORTFLOW_LOG_LEVEL=info",
	}
	apiAddrs := startHTTPProcess(t, apiBin, append([]string{
		"DATABASE_URL=" + s.dbURL,
		"TEMPORAL_ADDRESS=" + testenv.TemporalAddress(t),
		"SUPPORTFLOW_TASK_QUEUE=" + s.taskQueue,
		"SUPPORTFLOW_ACCOUNT=" + s.ledger.Account(),
		"SUPPORTFLOW_PAYLOAD_KEYS=" + s.payloadKeys,
		"SUPPORTFLOW_API_ADDR=127.0.0.1:0",
		"SUPPORTFLOW_METRICS_ADDR=127.0.0.1:0",
		"SUPPORTFLOW_API_TOKENS=" + apiTokensEnv(),
		"SUPPORTFLOW_CODEC_TOKENS=" + codecToken,
		"ZENDESK_WEBHOOK_SECRET=" + webhookSecret,
		"ZENDESK_API_USER_ID=" + strconv.FormatInt(standin.ZendeskAgentID, 10),
		"SUPPORTFLOW_API_MAX_STREAMS_PER_TOKEN=" + strconv.Itoa(maxStreamsPerToken),
		"SUPPORTFLOW_API_SSE_KEEPALIVE=" + sseKeepAlive.String(),
	}, httpEnv...), "api listening", "metrics at /metrics")
	apiAddr, metricsAddr := loopback(apiAddrs["api listening"]), loopback(apiAddrs["metrics at /metrics"])
	gatewayAddr := loopback(startHTTPProcess(t, gatewayBin, append([]string{
		"SUPPORTFLOW_CODEC_GATEWAY_ADDR=127.0.0.1:0",
		"SUPPORTFLOW_CODEC_UPSTREAM=http://" + apiAddr,
		"SUPPORTFLOW_CODEC_TOKENS=" + codecToken,
	}, httpEnv...), "codec gateway listening")["codec gateway listening"])
	servers := []struct{ name, addr, path string }{
		{"api", apiAddr, "/healthz"},
		{"metrics", metricsAddr, "/metrics"},
		{"codec-gateway", gatewayAddr, "/not-codec"}, // answered by the gateway itself
	}

	t.Run("connections", func(t *testing.T) {
		for _, srv := range servers {
			t.Run(srv.name+"/idle keep-alive closed after the idle timeout", func(t *testing.T) {
				t.Parallel()
				conn, err := net.Dial("tcp", srv.addr)
				require.NoError(t, err)
				defer conn.Close()
				_, err = fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", srv.path, srv.addr)
				require.NoError(t, err)
				br := bufio.NewReader(conn)
				resp, err := http.ReadResponse(br, nil)
				require.NoError(t, err)
				_, err = io.Copy(io.Discard, resp.Body)
				require.NoError(t, err)
				resp.Body.Close()
				require.False(t, resp.Close, "the server keeps the connection alive after answering")
				idleSince := time.Now()
				took, rest := waitClosedByServer(t, readerConn{conn, br}, idleSince)
				assert.Empty(t, rest, "nothing is sent on an idle connection")
				assert.GreaterOrEqual(t, took, httpIdleTimeout*8/10, "closed no sooner than the idle timeout (%s): it was idle, not slow", httpIdleTimeout)
			})
			t.Run(srv.name+"/unfinished headers cut off after the header timeout", func(t *testing.T) {
				t.Parallel()
				conn, err := net.Dial("tcp", srv.addr)
				require.NoError(t, err)
				defer conn.Close()
				start := time.Now()
				_, err = fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\n", srv.path, srv.addr)
				require.NoError(t, err)
				// A header line every 100 ms, never the blank line that ends
				// them: the connection is never silent, so only a deadline on
				// the whole header can end it.
				stop := make(chan struct{})
				defer close(stop)
				go trickle(conn, stop, "X-Slow: a\r\n")
				took, got := waitClosedByServer(t, conn, start)
				assert.GreaterOrEqual(t, took, httpReadHeaderTimeout*8/10)
				assert.NotContains(t, string(got), "200 OK", "the unfinished request is never served")
			})
		}
		t.Run("api/unfinished body cut off after the read timeout", func(t *testing.T) {
			t.Parallel()
			conn, err := net.Dial("tcp", apiAddr)
			require.NoError(t, err)
			defer conn.Close()
			start := time.Now()
			_, err = fmt.Fprintf(conn, "POST /webhooks/zendesk HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{", apiAddr)
			require.NoError(t, err)
			stop := make(chan struct{})
			defer close(stop)
			go trickle(conn, stop, " ")
			took, got := waitClosedByServer(t, conn, start)
			assert.GreaterOrEqual(t, took, httpReadTimeout*8/10)
			if len(got) > 0 {
				// The API may still say why before it closes: a 400, never
				// a request it served.
				resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(got)), nil)
				require.NoError(t, err, "%s", got)
				assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s", got)
			}
		})
	})

	base := "http://" + apiAddr
	t.Run("streams", func(t *testing.T) {
		first, resp, body := openStream(t, base, ticket, appToken)
		require.NotNil(t, first, "the first stream is admitted: %d %s", resp.StatusCode, body)

		// The stream lives through three write timeouts, and still
		// delivers: a keep-alive after them.
		outlived := first.opened.Add(3 * httpWriteTimeout)
		require.Eventually(t, func() bool {
			lines := first.snapshot()
			return len(lines) > 0 && lines[len(lines)-1].at.After(outlived)
		}, closeBudget, 50*time.Millisecond, "the stream delivers after %s", 3*httpWriteTimeout)
		select {
		case <-first.ended:
			t.Fatal("the stream ended")
		default:
		}
		lines := first.snapshot()
		assert.Equal(t, "event: draft", lines[0].text, "the stream opens with the draft")
		var keepAlives int
		for _, l := range lines {
			if l.at.After(first.opened.Add(httpWriteTimeout)) && strings.HasPrefix(l.text, ": keep-alive") {
				keepAlives++
			}
		}
		assert.Positive(t, keepAlives, "keep-alives arrive after the write timeout: %v", lines)

		// The cap: a second stream of the same token is admitted, a third
		// refused.
		second, resp, body := openStream(t, base, ticket, appToken)
		require.NotNil(t, second, "the second stream is admitted: %d %s", resp.StatusCode, body)
		refused, resp, body := openStream(t, base, ticket, appToken)
		require.Nil(t, refused, "a third stream of the token is refused")
		require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "%s", body)
		retryAfter, err := strconv.Atoi(resp.Header.Get("Retry-After"))
		require.NoError(t, err, "Retry-After is a number of seconds: %q", resp.Header.Get("Retry-After"))
		assert.Positive(t, retryAfter)
		assert.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
		var p api.Problem
		require.NoError(t, json.Unmarshal(body, &p), "%s", body)
		assert.Equal(t, "/problems/too-many-streams", p.Type)
		assert.Equal(t, http.StatusTooManyRequests, p.Status)
		assert.Contains(t, p.Detail, "test-app", "the problem names the token")
		assert.NotContains(t, string(body), appToken, "the token is never echoed")

		// Another token's stream is counted apart.
		other, resp, body := openStream(t, base, ticket, apiToken)
		require.NotNil(t, other, "another token's stream is admitted: %d %s", resp.StatusCode, body)

		// Closing one of the first token's streams frees its place.
		first.cancel()
		<-first.ended
		var again *sseStream
		for deadline := time.Now().Add(waitBudget); again == nil; time.Sleep(100 * time.Millisecond) {
			require.True(t, time.Now().Before(deadline), "no stream admitted %s after one of the token's ended", waitBudget)
			var resp *http.Response
			again, resp, body = openStream(t, base, ticket, appToken)
			if again == nil {
				require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "%s", body)
			}
		}
		// And the token is at its cap again.
		refused, resp, body = openStream(t, base, ticket, appToken)
		require.Nil(t, refused)
		assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "%s", body)
	})
}

// trickle writes piece every 100 ms until stop closes or a write fails.
func trickle(conn net.Conn, stop <-chan struct{}, piece string) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			if _, err := io.WriteString(conn, piece); err != nil {
				return
			}
		}
	}
}

// readerConn reads through r what was buffered from Conn.
type readerConn struct {
	net.Conn
	r *bufio.Reader
}

func (c readerConn) Read(p []byte) (int, error) { return c.r.Read(p) }
