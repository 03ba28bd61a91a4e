package standin

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"cloud.google.com/go/bigquery"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
)

const bqTestSQL = "SELECT customer_id FROM `proj.ds.customers` WHERE zendesk_user_id = @requester_id"

// bqCall sends one raw request to the BigQuery stand-in, with body encoded
// as JSON when not nil, and decodes the JSON answer.
func bqCall(t *testing.T, srv *httptest.Server, method, path string, body any) (int, map[string]any, http.Header) {
	t.Helper()
	var rd *bytes.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(raw)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+path, rd)
	require.NoError(t, err)
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return resp.StatusCode, out, resp.Header
}

// bqQueryBody is a jobs.query body as the client library sends it.
func bqQueryBody(sql, requesterID string) map[string]any {
	return map[string]any{
		"query":        sql,
		"useLegacySql": false,
		"location":     "US",
		"queryParameters": []any{map[string]any{
			"name":           "requester_id",
			"parameterType":  map[string]any{"type": "INT64"},
			"parameterValue": map[string]any{"value": requesterID},
		}},
	}
}

func newBigQueryEnv(t *testing.T) (*BigQuery, *httptest.Server) {
	t.Helper()
	b := NewBigQuery("proj")
	b.AddCustomer(4242, BQCustomer{
		CustomerID:          "cus_1",
		Email:               "a@example.com",
		Orders:              3,
		ActiveSubscriptions: []string{"sub_b", "sub_a"},
	})
	srv := httptest.NewServer(b)
	t.Cleanup(srv.Close)
	return b, srv
}

// bqErrorOf returns the reason and checks the shape of a BigQuery error
// body.
func bqErrorOf(t *testing.T, status int, body map[string]any) string {
	t.Helper()
	e, ok := body["error"].(map[string]any)
	require.True(t, ok, "error body: %v", body)
	assert.Equal(t, float64(status), e["code"])
	assert.NotEmpty(t, e["message"])
	assert.NotEmpty(t, e["status"])
	items, ok := e["errors"].([]any)
	require.True(t, ok)
	require.Len(t, items, 1)
	item := items[0].(map[string]any)
	assert.Equal(t, "global", item["domain"])
	assert.Equal(t, e["message"], item["message"])
	return item["reason"].(string)
}

var wantBigQueryRow = []any{map[string]any{"f": []any{
	map[string]any{"v": "cus_1"},
	map[string]any{"v": "a@example.com"},
	map[string]any{"v": "3"},
	map[string]any{"v": []any{map[string]any{"v": "sub_a"}, map[string]any{"v": "sub_b"}}},
}}}

func TestBigQueryQueryResultsAndJob(t *testing.T) {
	b, srv := newBigQueryEnv(t)
	b.SetNextJobID("job_1")
	b.SetBytesBilled(3_000_000_000)

	status, body, _ := bqCall(t, srv, http.MethodPost, "/bigquery/v2/projects/proj/queries", bqQueryBody(bqTestSQL, "4242"))
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, "bigquery#queryResponse", body["kind"])
	assert.Equal(t, map[string]any{"projectId": "proj", "jobId": "job_1", "location": "US"}, body["jobReference"])
	assert.Equal(t, true, body["jobComplete"])
	assert.Equal(t, "1", body["totalRows"])
	assert.Equal(t, "1572864", body["totalBytesProcessed"])
	assert.Equal(t, "3000000000", body["totalBytesBilled"])
	assert.Equal(t, wantBigQueryRow, body["rows"])
	fields := body["schema"].(map[string]any)["fields"].([]any)
	require.Len(t, fields, 4)
	assert.Equal(t, map[string]any{"name": "lifetime_orders", "type": "INTEGER", "mode": "NULLABLE"}, fields[2])
	assert.Equal(t, map[string]any{"name": "active_subscriptions", "type": "STRING", "mode": "REPEATED"}, fields[3])
	assert.Equal(t, 1, b.Queries())
	assert.Equal(t, 1, b.CompletedLookups())

	// getQueryResults: the same rows; maxResults pages them.
	status, body, _ = bqCall(t, srv, http.MethodGet, "/bigquery/v2/projects/proj/queries/job_1?location=US", nil)
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, "bigquery#getQueryResultsResponse", body["kind"])
	assert.Equal(t, wantBigQueryRow, body["rows"])
	assert.Nil(t, body["pageToken"])

	status, body, _ = bqCall(t, srv, http.MethodGet, "/bigquery/v2/projects/proj/queries/job_1?maxResults=0", nil)
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, true, body["jobComplete"])
	assert.Nil(t, body["rows"])
	assert.Equal(t, "1", body["totalRows"])
	token, ok := body["pageToken"].(string)
	require.True(t, ok)
	status, body, _ = bqCall(t, srv, http.MethodGet, "/bigquery/v2/projects/proj/queries/job_1?pageToken="+token, nil)
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, wantBigQueryRow, body["rows"])
	assert.Equal(t, 1, b.CompletedLookups(), "each job counts once")

	status, body, _ = bqCall(t, srv, http.MethodGet, "/bigquery/v2/projects/proj/queries/job_1?pageToken=bogus", nil)
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Equal(t, "invalid", bqErrorOf(t, status, body))

	// jobs.get: statistics as strings, int64 beyond 2^31 intact.
	status, body, _ = bqCall(t, srv, http.MethodGet, "/bigquery/v2/projects/proj/jobs/job_1?location=us", nil)
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, "proj:US.job_1", body["id"])
	assert.Equal(t, map[string]any{"state": "DONE"}, body["status"])
	stats := body["statistics"].(map[string]any)
	assert.Equal(t, "1572864", stats["totalBytesProcessed"])
	assert.Equal(t, "3000000000", stats["query"].(map[string]any)["totalBytesBilled"])
	assert.Equal(t, "1572864", stats["query"].(map[string]any)["totalBytesProcessed"])
	assert.Equal(t, bqTestSQL, body["configuration"].(map[string]any)["query"].(map[string]any)["query"])
}

func TestBigQueryUnknownRequesterHasNoRows(t *testing.T) {
	b, srv := newBigQueryEnv(t)

	status, body, _ := bqCall(t, srv, http.MethodPost, "/bigquery/v2/projects/proj/queries", bqQueryBody(bqTestSQL, "777"))
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, true, body["jobComplete"])
	assert.Equal(t, "0", body["totalRows"])
	assert.Nil(t, body["rows"], "BigQuery omits rows when there are none")
	assert.Regexp(t, `^job_[A-Z2-7]+$`, body["jobReference"].(map[string]any)["jobId"])
	assert.Equal(t, 1, b.CompletedLookups())
}

func TestBigQueryRefusesValuesInSQL(t *testing.T) {
	b, srv := newBigQueryEnv(t)

	tests := map[string]map[string]any{
		"literal id":       bqQueryBody("SELECT * FROM t WHERE zendesk_user_id = 4242 AND @requester_id IS NOT NULL", "4242"),
		"no parameter":     {"query": "SELECT * FROM t WHERE zendesk_user_id = 4242", "useLegacySql": false},
		"unused parameter": bqQueryBody("SELECT * FROM t", "4242"),
		"legacy SQL":       func() map[string]any { q := bqQueryBody(bqTestSQL, "4242"); delete(q, "useLegacySql"); return q }(),
		"string parameter": func() map[string]any {
			q := bqQueryBody(bqTestSQL, "4242")
			q["queryParameters"].([]any)[0].(map[string]any)["parameterType"] = map[string]any{"type": "STRING"}
			return q
		}(),
	}
	for name, req := range tests {
		t.Run(name, func(t *testing.T) {
			status, body, _ := bqCall(t, srv, http.MethodPost, "/bigquery/v2/projects/proj/queries", req)
			assert.Equal(t, http.StatusBadRequest, status)
			assert.Equal(t, "invalidQuery", bqErrorOf(t, status, body))
			assert.Equal(t, "INVALID_ARGUMENT", body["error"].(map[string]any)["status"])
		})
	}
	// The digits inside an identifier or a longer number are not the ID.
	status, body, _ := bqCall(t, srv, http.MethodPost, "/bigquery/v2/projects/proj/queries",
		bqQueryBody("SELECT * FROM `p.ds_4242.t` WHERE x = 142424 AND zendesk_user_id = @requester_id", "4242"))
	assert.Equal(t, http.StatusOK, status, body)

	sql, params := b.LastQuery()
	assert.Contains(t, sql, "ds_4242")
	assert.Equal(t, map[string]string{"requester_id": "4242"}, params)
	assert.Equal(t, len(tests)+1, b.Queries())
	assert.Equal(t, 1, b.CompletedLookups())
}

func TestBigQueryNotFound(t *testing.T) {
	b, srv := newBigQueryEnv(t)
	b.SetNextJobID("job_us")
	status, body, _ := bqCall(t, srv, http.MethodPost, "/bigquery/v2/projects/proj/queries", bqQueryBody(bqTestSQL, "4242"))
	require.Equal(t, http.StatusOK, status, body)

	for _, path := range []string{
		"/bigquery/v2/projects/proj/jobs/job_nope",
		"/bigquery/v2/projects/proj/queries/job_nope",
		"/bigquery/v2/projects/proj/jobs/job_us?location=EU", // wrong location
		"/bigquery/v2/projects/other/jobs/job_us",            // wrong project
		"/bigquery/v2/projects/proj/datasets",
		"/v1/anything",
	} {
		status, body, _ := bqCall(t, srv, http.MethodGet, path, nil)
		assert.Equal(t, http.StatusNotFound, status, path)
		assert.Equal(t, "notFound", bqErrorOf(t, status, body), path)
	}
	status, body, _ = bqCall(t, srv, http.MethodDelete, "/bigquery/v2/projects/proj/jobs/job_us", nil)
	assert.Equal(t, http.StatusNotFound, status)
	assert.Equal(t, "notFound", bqErrorOf(t, status, body))
	assert.Equal(t, []string{"other"}, b.OtherProjects())
}

func TestBigQueryPathsWithoutPrefix(t *testing.T) {
	b, srv := newBigQueryEnv(t)
	b.SetNextJobID("job_np")

	status, body, _ := bqCall(t, srv, http.MethodPost, "/projects/proj/queries", bqQueryBody(bqTestSQL, "4242"))
	require.Equal(t, http.StatusOK, status, body)
	status, body, _ = bqCall(t, srv, http.MethodGet, "/projects/proj/queries/job_np", nil)
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, wantBigQueryRow, body["rows"])
	status, body, _ = bqCall(t, srv, http.MethodGet, "/projects/proj/jobs/job_np", nil)
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, "DONE", body["status"].(map[string]any)["state"])
	assert.Equal(t, 1, b.Queries())
}

func TestBigQueryRequestIDDeduplicates(t *testing.T) {
	b, srv := newBigQueryEnv(t)
	req := bqQueryBody(bqTestSQL, "4242")
	req["requestId"] = "request-1"

	_, first, _ := bqCall(t, srv, http.MethodPost, "/bigquery/v2/projects/proj/queries", req)
	_, second, _ := bqCall(t, srv, http.MethodPost, "/bigquery/v2/projects/proj/queries", req)
	assert.Equal(t, first["jobReference"], second["jobReference"])
	assert.Equal(t, 2, b.Queries())
	assert.Equal(t, 1, b.CompletedLookups())
}

func TestBigQueryFaultOnlyMatchingRequests(t *testing.T) {
	b, srv := newBigQueryEnv(t)
	b.SetNextJobID("job_f")
	arrived := make(chan struct{}, 1)
	b.Inject(BigQueryFault{
		Method:     http.MethodGet,
		Path:       "/bigquery/v2/projects/proj/jobs/*",
		Status:     http.StatusForbidden,
		Reason:     "rateLimitExceeded",
		RetryAfter: 1500 * time.Millisecond,
		Arrived:    arrived,
	})

	status, _, _ := bqCall(t, srv, http.MethodPost, "/bigquery/v2/projects/proj/queries", bqQueryBody(bqTestSQL, "4242"))
	assert.Equal(t, http.StatusOK, status)
	assert.Len(t, arrived, 0)

	status, body, h := bqCall(t, srv, http.MethodGet, "/bigquery/v2/projects/proj/jobs/job_f", nil)
	assert.Equal(t, http.StatusForbidden, status)
	assert.Equal(t, "rateLimitExceeded", bqErrorOf(t, status, body))
	assert.Equal(t, "PERMISSION_DENIED", body["error"].(map[string]any)["status"])
	assert.Equal(t, "2", h.Get("Retry-After"))
	assert.Len(t, arrived, 1)

	// Times 0 means once.
	status, _, _ = bqCall(t, srv, http.MethodGet, "/bigquery/v2/projects/proj/jobs/job_f", nil)
	assert.Equal(t, http.StatusOK, status)

	// Default reasons, and faulted queries still count.
	b.Inject(BigQueryFault{Times: 2, Status: http.StatusInternalServerError})
	for range 2 {
		status, body, _ = bqCall(t, srv, http.MethodPost, "/bigquery/v2/projects/proj/queries", bqQueryBody(bqTestSQL, "4242"))
		assert.Equal(t, http.StatusInternalServerError, status)
		assert.Equal(t, "backendError", bqErrorOf(t, status, body))
	}
	b.Inject(BigQueryFault{Times: -1, Status: http.StatusServiceUnavailable})
	b.ClearFaults()
	status, _, _ = bqCall(t, srv, http.MethodPost, "/bigquery/v2/projects/proj/queries", bqQueryBody(bqTestSQL, "4242"))
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, 4, b.Queries())
	assert.Equal(t, 2, b.CompletedLookups())
}

func TestBigQueryStayRunning(t *testing.T) {
	b, srv := newBigQueryEnv(t)
	b.SetNextJobID("job_slow")
	b.Inject(BigQueryFault{StayRunning: true})

	status, body, _ := bqCall(t, srv, http.MethodPost, "/bigquery/v2/projects/proj/queries", bqQueryBody(bqTestSQL, "4242"))
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, false, body["jobComplete"])
	assert.Equal(t, "job_slow", body["jobReference"].(map[string]any)["jobId"])
	assert.Nil(t, body["rows"])
	assert.Nil(t, body["schema"])

	// The fault is used up, but the job it created never completes.
	for range 3 {
		status, body, _ = bqCall(t, srv, http.MethodGet, "/bigquery/v2/projects/proj/queries/job_slow", nil)
		require.Equal(t, http.StatusOK, status, body)
		assert.Equal(t, false, body["jobComplete"])
	}
	status, body, _ = bqCall(t, srv, http.MethodGet, "/bigquery/v2/projects/proj/jobs/job_slow", nil)
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, "RUNNING", body["status"].(map[string]any)["state"])
	assert.Nil(t, body["statistics"].(map[string]any)["query"])
	assert.Equal(t, 0, b.CompletedLookups())
}

func TestBigQueryPendingPolls(t *testing.T) {
	b, srv := newBigQueryEnv(t)
	b.SetNextJobID("job_p")
	b.Inject(BigQueryFault{PendingPolls: 2})

	_, body, _ := bqCall(t, srv, http.MethodPost, "/bigquery/v2/projects/proj/queries", bqQueryBody(bqTestSQL, "4242"))
	assert.Equal(t, false, body["jobComplete"])
	_, body, _ = bqCall(t, srv, http.MethodGet, "/bigquery/v2/projects/proj/jobs/job_p", nil)
	assert.Equal(t, "RUNNING", body["status"].(map[string]any)["state"])
	for range 2 {
		_, body, _ = bqCall(t, srv, http.MethodGet, "/bigquery/v2/projects/proj/queries/job_p", nil)
		assert.Equal(t, false, body["jobComplete"])
	}
	_, body, _ = bqCall(t, srv, http.MethodGet, "/bigquery/v2/projects/proj/queries/job_p", nil)
	assert.Equal(t, true, body["jobComplete"])
	assert.Equal(t, wantBigQueryRow, body["rows"])
	_, body, _ = bqCall(t, srv, http.MethodGet, "/bigquery/v2/projects/proj/jobs/job_p", nil)
	assert.Equal(t, "DONE", body["status"].(map[string]any)["state"])
	assert.Equal(t, 1, b.CompletedLookups())
}

func TestBigQueryDelayEndsWhenClientLeaves(t *testing.T) {
	b := NewBigQuery("proj")
	handlerDone := make(chan time.Time, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.ServeHTTP(w, r)
		handlerDone <- time.Now()
	}))
	t.Cleanup(srv.Close)
	b.Inject(BigQueryFault{Delay: 10 * time.Second})

	raw, err := json.Marshal(bqQueryBody(bqTestSQL, "1"))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/bigquery/v2/projects/proj/queries", bytes.NewReader(raw))
	require.NoError(t, err)
	start := time.Now()
	_, err = srv.Client().Do(req)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	select {
	case done := <-handlerDone:
		assert.Less(t, done.Sub(start), 2*time.Second)
	case <-time.After(3 * time.Second):
		t.Fatal("the handler kept sleeping after the client left")
	}
	assert.Equal(t, 1, b.Queries())
	assert.Equal(t, 0, b.CompletedLookups())
}

// The real client, pointed at the stand-in without the /bigquery/v2
// prefix, runs the fast path.
func TestBigQueryRealClientWithoutPrefix(t *testing.T) {
	b, srv := newBigQueryEnv(t)
	c, err := bigquery.NewClient(t.Context(), "proj",
		option.WithEndpoint(srv.URL+"/"), option.WithoutAuthentication(), option.WithHTTPClient(srv.Client()))
	require.NoError(t, err)
	defer c.Close()

	q := c.Query(bqTestSQL)
	q.Parameters = []bigquery.QueryParameter{{Name: "requester_id", Value: int64(4242)}}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	it, err := q.Read(ctx)
	require.NoError(t, err)
	var rows [][]bigquery.Value
	for {
		var row []bigquery.Value
		err := it.Next(&row)
		if err == iterator.Done {
			break
		}
		require.NoError(t, err)
		rows = append(rows, row)
	}
	assert.Equal(t, [][]bigquery.Value{{"cus_1", "a@example.com", int64(3), []bigquery.Value{"sub_a", "sub_b"}}}, rows)
	assert.Equal(t, 1, b.Queries())
	assert.Equal(t, 1, b.Requests(http.MethodPost, "/projects/proj/queries"))
	assert.Equal(t, 0, b.Requests(http.MethodGet, "/projects/proj/queries/"), "fast path: no getQueryResults")
}
