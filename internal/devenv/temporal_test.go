package devenv

import (
	"context"
	"debug/buildinfo"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
)

func TestEnsureTemporalCLI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	path, err := EnsureTemporalCLI(ctx, os.Stderr)
	require.NoError(t, err)
	if os.Getenv("TEMPORAL_CLI") == "" {
		info, err := buildinfo.ReadFile(path)
		require.NoError(t, err)
		assert.Equal(t, TemporalCLIVersion, info.Main.Version)
	}

	t.Setenv("TEMPORAL_CLI", "/nonexistent/temporal")
	path, err = EnsureTemporalCLI(ctx, nil)
	require.NoError(t, err)
	assert.Equal(t, "/nonexistent/temporal", path, "TEMPORAL_CLI wins")
}

func TestTemporal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// Build the CLI first (if needed) so the start-up time below is the
	// server's own.
	_, err := EnsureTemporalCLI(ctx, os.Stderr)
	require.NoError(t, err)

	start := time.Now()
	tmp, err := StartTemporal(ctx, TemporalOptions{
		SearchAttributes: map[string]string{"SupportflowDevenvTest": "Keyword"},
		Log:              testLog(t),
		Progress:         os.Stderr,
	})
	require.NoError(t, err)
	t.Logf("temporal started in %s at %s", time.Since(start), tmp.Address)
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = tmp.Stop()
		}
	})
	assert.Empty(t, tmp.UIURL, "headless")
	assert.Equal(t, "default", tmp.Namespace)

	c, err := client.DialContext(ctx, client.Options{
		HostPort: tmp.Address,
		Logger:   sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler)),
	})
	require.NoError(t, err)
	resp, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: "default"})
	require.NoError(t, err)
	assert.Equal(t, enums.INDEXED_VALUE_TYPE_KEYWORD, resp.GetCustomAttributes()["SupportflowDevenvTest"])
	c.Close()

	start = time.Now()
	require.NoError(t, tmp.Stop())
	stopped = true
	t.Logf("temporal stopped in %s", time.Since(start))
	assertClosed(t, tmp.Address)
	assert.NoError(t, tmp.Stop(), "Stop twice is fine")
}

func TestTemporalNamespaceAndUI(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a second dev server")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dbFile := t.TempDir() + "/temporal.db"
	tmp, err := StartTemporal(ctx, TemporalOptions{Namespace: "sf-test", UI: true, DBFile: dbFile, Log: testLog(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = tmp.Stop() })
	assert.Equal(t, "sf-test", tmp.Namespace)
	assert.NotEmpty(t, tmp.UIURL)
	_, err = os.Stat(dbFile)
	assert.NoError(t, err, "state is kept in the DB file")
}
