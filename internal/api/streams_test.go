package api_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/api"
	"github.com/supportflow/supportflow/ledger"
	"github.com/supportflow/supportflow/starter"
)

// gatheringClient is a Temporal client whose every draft is gathering:
// enough for the event stream, which queries the draft and describes it.
type gatheringClient struct{ client.Client }

func (gatheringClient) QueryWorkflow(context.Context, string, string, string, ...any) (converter.EncodedValue, error) {
	return gathering{}, nil
}

func (gatheringClient) DescribeWorkflowExecution(context.Context, string, string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	return &workflowservice.DescribeWorkflowExecutionResponse{}, nil
}

type gathering struct{}

func (gathering) HasValue() bool { return true }
func (gathering) Get(v any) error {
	*v.(*supportflow.DraftStatus) = supportflow.DraftStatus{TicketID: 42, State: supportflow.DraftGathering}
	return nil
}

const (
	streamAppToken   = "stream-app-token-0123456789"
	streamOtherToken = "stream-other-token-0123456789"
	streamWrite      = 200 * time.Millisecond
)

// streamServer serves the API over a real http.Server with short read and
// write timeouts, a cap of two streams per token.
func streamServer(t *testing.T) string {
	t.Helper()
	srv, err := api.New(api.Config{Tokens: []api.Token{
		{Name: "app", Roles: []api.Role{api.RoleApp}, Secret: streamAppToken},
		{Name: "other", Roles: []api.Role{api.RoleApp}, Secret: streamOtherToken},
	}, WebhookSecret: "webhook-secret", ZendeskUserID: 1, PollInterval: 20 * time.Millisecond, KeepAlive: 50 * time.Millisecond,
		ReadTimeout: streamWrite, WriteTimeout: streamWrite, MaxStreamsPerToken: 2, StreamRetryAfter: 3 * time.Second},
		&starter.Starter{Client: gatheringClient{}}, ledger.New(nil, "acme"), nil, gatheringClient{}, slog.New(slog.NewJSONHandler(&bytes.Buffer{}, nil)))
	require.NoError(t, err)
	hs := httptest.NewUnstartedServer(srv)
	hs.Config.ReadHeaderTimeout, hs.Config.ReadTimeout, hs.Config.WriteTimeout = streamWrite, streamWrite, streamWrite
	hs.Start()
	t.Cleanup(func() { srv.Close(); hs.Close() })
	return hs.URL
}

type stream struct {
	cancel context.CancelFunc
	ended  chan struct{}
	mu     sync.Mutex
	lines  []string
	last   time.Time
}

func (s *stream) seen() ([]string, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.lines...), s.last
}

// open requests ticket 42's event stream: the stream, or the refusal.
func open(t *testing.T, url, token string) (*stream, *http.Response, []byte) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", url+"/tickets/42/draft/events", nil)
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
	s := &stream{cancel: cancel, ended: make(chan struct{})}
	go func() {
		defer close(s.ended)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if sc.Text() != "" {
				s.mu.Lock()
				s.lines, s.last = append(s.lines, sc.Text()), time.Now()
				s.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-s.ended })
	return s, resp, nil
}

// An event stream outlives the server's write (and read) timeout, still
// delivering; a token holds two at once, the third is 429 with a
// Retry-After and a problem, another token's is admitted, and one ending
// frees its place.
func TestDraftEvents_OutliveTimeoutsAndCapPerToken(t *testing.T) {
	url := streamServer(t)
	first, resp, body := open(t, url, streamAppToken)
	require.NotNil(t, first, "%d %s", resp.StatusCode, body)
	opened := time.Now()
	require.Eventually(t, func() bool {
		_, last := first.seen()
		return last.After(opened.Add(5 * streamWrite))
	}, 30*time.Second, 20*time.Millisecond, "the stream still delivers after five write timeouts")
	lines, _ := first.seen()
	assert.Equal(t, "event: draft", lines[0])
	assert.Contains(t, lines, ": keep-alive")

	second, resp, body := open(t, url, streamAppToken)
	require.NotNil(t, second, "%d %s", resp.StatusCode, body)
	third, resp, body := open(t, url, streamAppToken)
	require.Nil(t, third)
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "3", resp.Header.Get("Retry-After"))
	assert.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
	var p api.Problem
	require.NoError(t, json.Unmarshal(body, &p), "%s", body)
	assert.Equal(t, api.Problem{Type: "/problems/too-many-streams", Title: "Too many open event streams", Status: http.StatusTooManyRequests,
		Detail: fmt.Sprintf(`token %q holds 2 event streams open, the most it may; close one, or retry after the Retry-After`, "app")}, p)

	other, resp, body := open(t, url, streamOtherToken)
	require.NotNil(t, other, "another token's stream is admitted: %d %s", resp.StatusCode, body)

	first.cancel()
	<-first.ended
	var again *stream
	for deadline := time.Now().Add(30 * time.Second); again == nil; time.Sleep(20 * time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "no stream admitted after one ended")
		again, resp, body = open(t, url, streamAppToken)
		if again == nil {
			require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "%s", body)
		}
	}
	refused, resp, _ := open(t, url, streamAppToken)
	assert.Nil(t, refused)
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	for _, s := range []*stream{second, other, again} {
		select {
		case <-s.ended:
			t.Fatal("a stream ended")
		default:
		}
	}
}
