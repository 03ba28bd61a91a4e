// Package testdb gives tests a PostgreSQL database with supportflow's
// schema. It is apart from testenv because the migrations' own tests use
// testenv, and this package imports the migrations.
package testdb

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/supportflow/supportflow/internal/testenv"
	"github.com/supportflow/supportflow/migrations"
)

// MigratedPool is testenv.Pool on a database migrated to supportflow's
// schema, closed (before the database is dropped) when the test ends.
func MigratedPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool := testenv.Pool(t)
	if _, err := migrations.MigrateURL(context.Background(), pool.Config().ConnString()); err != nil {
		t.Fatalf("testdb: migrating: %v", err)
	}
	return pool
}
