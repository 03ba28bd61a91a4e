package starter_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A Go app in another module can import starter: Go refuses an internal
// package from outside its module, so nothing starter or codec pulls in
// may be one, and neither may pull in the database driver or a client of
// the services the workers call.
func TestStarter_ImportableFromAnotherModule(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/supportflow/supportflow/starter", "github.com/supportflow/supportflow/codec").Output()
	require.NoError(t, err)
	for _, p := range strings.Fields(string(out)) {
		require.NotContains(t, p, "supportflow/internal/", "starter depends on %s, which another module cannot import", p)
		for _, banned := range []string{"jackc/pgx", "cloud.google.com/go/bigquery", "go-zendesk", "openai-go", "supportflow/ledger"} {
			require.NotContains(t, p, banned, "starter depends on %s", p)
		}
	}
}
