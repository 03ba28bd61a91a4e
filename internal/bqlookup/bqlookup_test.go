package bqlookup_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/bqlookup"
	"github.com/supportflow/supportflow/internal/standin"
)

const (
	testProject = "proj"
	// testRequester is long enough that its digits cannot turn up in the
	// SQL by accident.
	testRequester int64 = 98765432101
)

// newLookupEnv serves a BigQuery stand-in seeded with one customer and
// returns it with a client pointed at it.
func newLookupEnv(t *testing.T) (*standin.BigQuery, *bqlookup.Client) {
	t.Helper()
	bq := standin.NewBigQuery(testProject)
	bq.AddCustomer(testRequester, standin.BQCustomer{
		CustomerID:          "cus_42",
		Email:               "ada@example.com",
		Orders:              7,
		ActiveSubscriptions: []string{"sub_zeta", "sub_alpha", "sub_mid"},
	})
	srv := httptest.NewServer(bq)
	t.Cleanup(srv.Close)
	c, err := bqlookup.New(t.Context(), bqlookup.Config{
		Endpoint:   srv.URL + standin.BigQueryBasePath,
		ProjectID:  testProject,
		Dataset:    "commerce",
		HTTPClient: srv.Client(),
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return bq, c
}

// deadlineCtx returns a context that ends after d.
func deadlineCtx(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestLookupFindsCustomer(t *testing.T) {
	t.Parallel()
	bq, c := newLookupEnv(t)

	res, err := c.LookupCustomer(deadlineCtx(t, 2*time.Second), testRequester)
	require.NoError(t, err)
	assert.True(t, res.Found)
	assert.Equal(t, supportflow.Customer{
		CustomerID:          "cus_42",
		Email:               "ada@example.com",
		LifetimeOrders:      7,
		ActiveSubscriptions: []string{"sub_alpha", "sub_mid", "sub_zeta"},
	}, res.Customer)
	assert.Regexp(t, `^proj:US\.job_[A-Z2-7]+$`, res.JobID)
	assert.Equal(t, standin.DefaultBigQueryBytesBilled, res.BytesBilled)
	assert.Equal(t, standin.BigQueryBytesProcessed, res.BytesProcessed)

	// The fast path: one jobs.query carrying the rows, one jobs.get for
	// the statistics, no getQueryResults.
	assert.Equal(t, 1, bq.Queries())
	assert.Equal(t, 1, bq.CompletedLookups())
	assert.Equal(t, 0, bq.Requests(http.MethodGet, "/bigquery/v2/projects/proj/queries/"))
	assert.Equal(t, 1, bq.Requests(http.MethodGet, "/bigquery/v2/projects/proj/jobs/"))
	assert.Equal(t, 2, bq.Requests("", "/"))
	assert.Empty(t, bq.OtherProjects())
}

func TestLookupUnknownRequesterNotFound(t *testing.T) {
	t.Parallel()
	bq, c := newLookupEnv(t)

	res, err := c.LookupCustomer(deadlineCtx(t, 2*time.Second), 12345678901)
	require.NoError(t, err)
	assert.False(t, res.Found)
	assert.Equal(t, supportflow.Customer{}, res.Customer)
	assert.NotEmpty(t, res.JobID)
	assert.Equal(t, standin.DefaultBigQueryBytesBilled, res.BytesBilled)
	assert.Equal(t, 1, bq.Queries())
	assert.Equal(t, 1, bq.CompletedLookups())
}

func TestLookupCustomerWithoutSubscriptions(t *testing.T) {
	t.Parallel()
	bq, c := newLookupEnv(t)
	bq.AddCustomer(5550001112, standin.BQCustomer{CustomerID: "cus_7"})

	res, err := c.LookupCustomer(deadlineCtx(t, 2*time.Second), 5550001112)
	require.NoError(t, err)
	require.True(t, res.Found)
	assert.Equal(t, "cus_7", res.Customer.CustomerID)
	assert.Equal(t, int64(0), res.Customer.LifetimeOrders)
	assert.NotNil(t, res.Customer.ActiveSubscriptions)
	assert.Empty(t, res.Customer.ActiveSubscriptions)
}

func TestLookupJobIDAndBytesBilled(t *testing.T) {
	t.Parallel()
	bq, c := newLookupEnv(t)
	bq.SetNextJobID("job_0Ab")
	bq.SetBytesBilled(2_500_000_000) // over 2^31

	res, err := c.LookupCustomer(deadlineCtx(t, 2*time.Second), testRequester)
	require.NoError(t, err)
	assert.Equal(t, "proj:US.job_0Ab", res.JobID)
	assert.Equal(t, int64(2500000000), res.BytesBilled)
}

func TestLookupLocation(t *testing.T) {
	t.Parallel()
	bq := standin.NewBigQuery(testProject)
	srv := httptest.NewServer(bq)
	t.Cleanup(srv.Close)
	// No trailing slash: New adds it.
	c, err := bqlookup.New(t.Context(), bqlookup.Config{
		Endpoint:  srv.URL + "/bigquery/v2",
		ProjectID: testProject,
		Dataset:   "commerce_eu",
		Location:  "EU",
	})
	require.NoError(t, err)
	defer c.Close()
	bq.SetNextJobID("job_eu")

	res, err := c.LookupCustomer(deadlineCtx(t, 2*time.Second), testRequester)
	require.NoError(t, err)
	assert.Equal(t, "proj:EU.job_eu", res.JobID)
}

func TestLookupSQLIsParameterized(t *testing.T) {
	t.Parallel()
	bq, c := newLookupEnv(t)

	_, err := c.LookupCustomer(deadlineCtx(t, 2*time.Second), testRequester)
	require.NoError(t, err)
	sql, params := bq.LastQuery()
	assert.Contains(t, sql, "@requester_id")
	assert.NotContains(t, sql, strconv.FormatInt(testRequester, 10))
	assert.Contains(t, sql, "`proj.commerce.customers`")
	assert.Contains(t, sql, "`proj.commerce.orders`")
	assert.Contains(t, sql, "`proj.commerce.subscriptions`")
	assert.Equal(t, map[string]string{"requester_id": strconv.FormatInt(testRequester, 10)}, params)
}

func TestLookupSlowJobPolls(t *testing.T) {
	t.Parallel()
	bq, c := newLookupEnv(t)
	// jobs.query answers jobComplete:false, so the library falls back to
	// polling getQueryResults and then reads the rows from it.
	bq.Inject(standin.BigQueryFault{PendingPolls: 2})

	res, err := c.LookupCustomer(deadlineCtx(t, 2*time.Second), testRequester)
	require.NoError(t, err)
	require.True(t, res.Found)
	assert.Equal(t, []string{"sub_alpha", "sub_mid", "sub_zeta"}, res.Customer.ActiveSubscriptions)
	assert.Equal(t, int64(7), res.Customer.LifetimeOrders)
	assert.Equal(t, standin.DefaultBigQueryBytesBilled, res.BytesBilled)
	assert.Equal(t, 1, bq.Queries())
	assert.Equal(t, 1, bq.CompletedLookups())
	// Two polls answered running, one that saw it complete (maxResults=0),
	// one that read the rows.
	assert.Equal(t, 4, bq.Requests(http.MethodGet, "/bigquery/v2/projects/proj/queries/"))
}

func TestLookupRateLimitedIsRetryable(t *testing.T) {
	t.Parallel()
	bq, c := newLookupEnv(t)
	// The library retries rateLimitExceeded by itself, so only a lasting
	// one reaches the caller, when the deadline ends the retries.
	bq.Inject(standin.BigQueryFault{
		Times:      -1,
		Method:     http.MethodPost,
		Status:     http.StatusForbidden,
		Reason:     "rateLimitExceeded",
		RetryAfter: 2 * time.Second,
	})

	start := time.Now()
	_, err := c.LookupCustomer(deadlineCtx(t, 300*time.Millisecond), testRequester)
	assert.Less(t, time.Since(start), time.Second)
	var e *bqlookup.Error
	require.ErrorAs(t, err, &e)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.False(t, e.Permanent())
	assert.False(t, e.MayHaveLanded())
	if e.Status != 0 { // 0 when the deadline struck mid-request
		assert.Equal(t, http.StatusForbidden, e.Status)
		assert.Equal(t, "rateLimitExceeded", e.Reason)
		assert.Equal(t, 2*time.Second, e.RetryAfterDelay())
	}
	assert.GreaterOrEqual(t, bq.Queries(), 1)
	assert.Equal(t, 0, bq.CompletedLookups())
}

func TestLookupForbiddenIsPermanent(t *testing.T) {
	t.Parallel()
	bq, c := newLookupEnv(t)
	bq.Inject(standin.BigQueryFault{Status: http.StatusForbidden, Reason: "accessDenied"})

	_, err := c.LookupCustomer(deadlineCtx(t, 2*time.Second), testRequester)
	var e *bqlookup.Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, http.StatusForbidden, e.Status)
	assert.Equal(t, "accessDenied", e.Reason)
	assert.True(t, e.Permanent())
	assert.Equal(t, 1, bq.Queries())
}

func TestLookupInvalidQueryIsPermanent(t *testing.T) {
	t.Parallel()
	bq, c := newLookupEnv(t)
	bq.Inject(standin.BigQueryFault{Status: http.StatusBadRequest, Reason: "invalidQuery"})

	start := time.Now()
	_, err := c.LookupCustomer(deadlineCtx(t, 2*time.Second), testRequester)
	assert.Less(t, time.Since(start), 500*time.Millisecond, "400 is not retried")
	var e *bqlookup.Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, http.StatusBadRequest, e.Status)
	assert.Equal(t, "invalidQuery", e.Reason)
	assert.Equal(t, "query", e.Op)
	assert.True(t, e.Permanent())
	assert.False(t, e.MayHaveLanded())
	assert.NotErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, 1, bq.Queries())
}

func TestLookupJobStatisticsNotFoundIsPermanent(t *testing.T) {
	t.Parallel()
	bq, c := newLookupEnv(t)
	bq.Inject(standin.BigQueryFault{Method: http.MethodGet, Path: "/bigquery/v2/projects/proj/jobs/*", Status: http.StatusNotFound})

	_, err := c.LookupCustomer(deadlineCtx(t, 2*time.Second), testRequester)
	var e *bqlookup.Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, "get job statistics", e.Op)
	assert.Equal(t, http.StatusNotFound, e.Status)
	assert.Equal(t, "notFound", e.Reason)
	assert.True(t, e.Permanent())
	assert.Equal(t, 1, bq.CompletedLookups())
}

// A lasting 500 backendError is retried inside the library with backoff
// until the deadline; the caller gets an error by the deadline that wraps
// context.DeadlineExceeded and, when the deadline struck between attempts
// (almost always: the stand-in answers at once), is the *Error of the last
// 500.
func TestLookupBackendErrorUntilDeadline(t *testing.T) {
	t.Parallel()
	bq, c := newLookupEnv(t)
	bq.Inject(standin.BigQueryFault{Times: -1, Status: http.StatusInternalServerError, Reason: "backendError"})

	start := time.Now()
	_, err := c.LookupCustomer(deadlineCtx(t, 300*time.Millisecond), testRequester)
	elapsed := time.Since(start)
	require.Error(t, err)
	assert.Less(t, elapsed, 600*time.Millisecond)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	var e *bqlookup.Error
	require.ErrorAs(t, err, &e)
	assert.False(t, e.Permanent())
	if e.Status != 0 {
		assert.Equal(t, http.StatusInternalServerError, e.Status)
		assert.Equal(t, "backendError", e.Reason)
	}
	assert.GreaterOrEqual(t, bq.Queries(), 1)
	assert.Equal(t, 0, bq.CompletedLookups())
}

// A single 503 is retried inside the library and the lookup succeeds.
func TestLookupTransientUnavailableRetriedByLibrary(t *testing.T) {
	t.Parallel()
	bq, c := newLookupEnv(t)
	bq.Inject(standin.BigQueryFault{Method: http.MethodPost, Status: http.StatusServiceUnavailable})

	// The library's first backoff is up to 1 s.
	res, err := c.LookupCustomer(deadlineCtx(t, 2500*time.Millisecond), testRequester)
	require.NoError(t, err)
	assert.True(t, res.Found)
	assert.Equal(t, 2, bq.Queries())
}

func TestLookupStayRunningEndsAtDeadline(t *testing.T) {
	t.Parallel()
	bq, c := newLookupEnv(t)
	bq.Inject(standin.BigQueryFault{StayRunning: true})

	start := time.Now()
	_, err := c.LookupCustomer(deadlineCtx(t, 500*time.Millisecond), testRequester)
	elapsed := time.Since(start)
	require.Error(t, err)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, elapsed, 800*time.Millisecond)
	var e *bqlookup.Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, 0, e.Status)
	assert.False(t, e.Permanent())
	assert.Equal(t, 1, bq.Queries())
	assert.GreaterOrEqual(t, bq.Requests(http.MethodGet, "/bigquery/v2/projects/proj/queries/"), 1)
	assert.Equal(t, 0, bq.CompletedLookups())
}

func TestLookupSlowAnswerEndsAtDeadline(t *testing.T) {
	t.Parallel()
	bq, c := newLookupEnv(t)
	arrived := make(chan struct{}, 1)
	bq.Inject(standin.BigQueryFault{Times: -1, Delay: 5 * time.Second, Arrived: arrived})

	start := time.Now()
	_, err := c.LookupCustomer(deadlineCtx(t, 300*time.Millisecond), testRequester)
	assert.Less(t, time.Since(start), time.Second)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	var e *bqlookup.Error
	require.ErrorAs(t, err, &e)
	assert.False(t, e.Permanent())
	select {
	case <-arrived:
	default:
		t.Fatal("the query never arrived")
	}
}

func TestLookupRequiresDeadline(t *testing.T) {
	t.Parallel()
	bq, c := newLookupEnv(t)

	_, err := c.LookupCustomer(context.Background(), testRequester)
	require.ErrorIs(t, err, bqlookup.ErrNoDeadline)
	var e *bqlookup.Error
	require.ErrorAs(t, err, &e)
	assert.True(t, e.Permanent())
	assert.Equal(t, 0, bq.Queries())
	assert.Equal(t, 0, bq.Requests("", "/"))
}

func TestLookupNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	good := bqlookup.Config{Endpoint: "http://127.0.0.1:1/bigquery/v2/", ProjectID: "proj", Dataset: "commerce"}
	tests := map[string]func(*bqlookup.Config){
		"dataset injection":    func(c *bqlookup.Config) { c.Dataset = "x; DROP" },
		"dataset with dot":     func(c *bqlookup.Config) { c.Dataset = "other.commerce" },
		"dataset with quote":   func(c *bqlookup.Config) { c.Dataset = "a`b" },
		"no dataset":           func(c *bqlookup.Config) { c.Dataset = "" },
		"no project":           func(c *bqlookup.Config) { c.ProjectID = "" },
		"project with quote":   func(c *bqlookup.Config) { c.ProjectID = "p`" },
		"endpoint scheme":      func(c *bqlookup.Config) { c.Endpoint = "ftp://example.com/" },
		"endpoint credentials": func(c *bqlookup.Config) { c.Endpoint = "http://user:hunter2@example.com/" },
		"endpoint query":       func(c *bqlookup.Config) { c.Endpoint = "http://example.com/?x=1" },
	}
	for name, mutate := range tests {
		t.Run(name, func(t *testing.T) {
			cfg := good
			mutate(&cfg)
			c, err := bqlookup.New(t.Context(), cfg)
			require.ErrorIs(t, err, bqlookup.ErrConfig)
			assert.Nil(t, c)
			assert.NotContains(t, err.Error(), "hunter2")
		})
	}

	c, err := bqlookup.New(t.Context(), good)
	require.NoError(t, err)
	assert.NoError(t, c.Close())
}

func TestLookupErrorMessage(t *testing.T) {
	t.Parallel()
	e := &bqlookup.Error{Op: "query", Status: 403, Reason: "rateLimitExceeded", Message: "Exceeded rate limits", RetryAfter: 2 * time.Second, Err: context.DeadlineExceeded}
	assert.Equal(t, "bqlookup: query: HTTP 403 rateLimitExceeded: Exceeded rate limits (retry after 2s): context deadline exceeded", e.Error())
	assert.False(t, e.Permanent())
	assert.True(t, errors.Is(e, context.DeadlineExceeded))

	quota := &bqlookup.Error{Status: 403, Reason: "quotaExceeded"}
	assert.False(t, quota.Permanent())
	for _, status := range []int{400, 401, 404} {
		assert.True(t, (&bqlookup.Error{Status: status}).Permanent(), status)
	}
	for _, status := range []int{429, 500, 502, 503, 504} {
		assert.False(t, (&bqlookup.Error{Status: status}).Permanent(), status)
	}
	assert.True(t, (&bqlookup.Error{Reason: "invalidQuery", Message: "job failed"}).Permanent())
	assert.False(t, strings.Contains((&bqlookup.Error{Message: "no answer"}).Error(), "HTTP"))
}
