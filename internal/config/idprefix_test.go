package config

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// SUPPORTFLOW_ID_PREFIX: unset is no prefix (today's IDs); a safe token is
// loaded by the worker and the API alike; anything else is refused by
// name, so an account never starts under IDs nothing else looks at.
func TestLoaders_IDPrefix(t *testing.T) {
	w, err := LoadWorkerFrom(MapEnv(required[ProgramWorker]))
	require.NoError(t, err)
	assert.Empty(t, w.IDPrefix)

	for _, p := range []Program{ProgramWorker, ProgramAPI} {
		got, err := load(p, MapEnv(with(required[p], EnvIDPrefix, "acme-eu")))
		require.NoError(t, err, p)
		switch c := got.(type) {
		case Worker:
			assert.Equal(t, "acme-eu", c.IDPrefix)
		case API:
			assert.Equal(t, "acme-eu", c.IDPrefix)
		}
		for _, bad := range []string{"acme/eu", "Acme", " acme", "acme-"} {
			_, err := load(p, MapEnv(with(required[p], EnvIDPrefix, bad)))
			require.ErrorIs(t, err, ErrConfig, "%s: %q", p, bad)
			assert.Contains(t, err.Error(), EnvIDPrefix)
		}
	}
}
