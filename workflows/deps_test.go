package workflows_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestContract_WorkflowsDependOnTheContractOnly: the deterministic core
// imports the contract, the Temporal SDK, policy and the standard library
// (and text, which is the standard library's strings with a bound), never
// a client, a database driver or telemetry: the payloads it handles are
// the contract's, and its activities are called by name. Everything it
// pulls in is listed by `go list -deps`; the count is printed against the
// floor of the SDK and policy alone.
func TestContract_WorkflowsDependOnTheContractOnly(t *testing.T) {
	deps := goList(t, "github.com/supportflow/supportflow/workflows")
	floor := goList(t, "go.temporal.io/sdk/workflow", "go.temporal.io/sdk/worker", "github.com/supportflow/supportflow/internal/policy")
	allowedOwn := map[string]bool{
		"github.com/supportflow/supportflow":                 true,
		"github.com/supportflow/supportflow/workflows":       true,
		"github.com/supportflow/supportflow/internal/policy": true,
		"github.com/supportflow/supportflow/internal/text":   true,
	}
	inFloor := map[string]bool{}
	for _, p := range floor {
		inFloor[p] = true
	}
	var extra []string
	for _, p := range deps {
		switch {
		case strings.HasPrefix(p, "github.com/supportflow/supportflow"):
			require.True(t, allowedOwn[p], "workflows depends on %s: only the contract, policy and text are allowed", p)
		case !inFloor[p]:
			extra = append(extra, p)
		}
	}
	for _, banned := range []string{"jackc/pgx", "cloud.google.com/go/bigquery", "nukosuke/go-zendesk", "openai/openai-go",
		"prometheus", "go.opentelemetry.io/otel/sdk", "supportflow/internal/telemetry"} {
		for _, p := range deps {
			require.NotContains(t, p, banned, "workflows depends on %s", p)
		}
	}
	t.Logf("workflows depends on %d packages; the SDK's workflow and worker packages with policy are %d; beyond them: %v", len(deps), len(floor), extra)
	require.LessOrEqual(t, len(extra), 10, "workflows pulls in more than the contract beyond the SDK's floor: %v", extra)
}

func goList(t *testing.T, pkgs ...string) []string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list", "-deps"}, pkgs...)...).Output()
	require.NoError(t, err)
	return strings.Fields(string(out))
}
