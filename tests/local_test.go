package tests

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The README's run command, as a new user runs it, in its -once mode: it
// starts its own PostgreSQL and dev server, the stand-ins and the worker,
// drafts the demo tickets, approves one, and checks exactly one comment
// and one cancellation per subscription landed.
func TestLocalRun_DemoProposalIsApplied(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "run", "github.com/supportflow/supportflow/internal/cmd/local", "-once", "-state", t.TempDir())
	var env []string
	for _, kv := range os.Environ() {
		switch strings.SplitN(kv, "=", 2)[0] {
		case "DATABASE_URL", "TEMPORAL_ADDRESS", "ZENDESK_URL", "ZENDESK_SUBDOMAIN", "SUBSCRIPTIONS_URL", "MODEL_BASE_URL":
			continue // the local run must bring up its own
		}
		env = append(env, kv)
	}
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "demo draft approved and applied: 1 comment, 2 cancellations")
	assert.Contains(t, string(out), "==> ready")
	assert.Contains(t, string(out), "Temporal Web UI: http://127.0.0.1:")
}
