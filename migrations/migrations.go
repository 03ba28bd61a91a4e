// Package migrations holds supportflow's PostgreSQL schema as versioned SQL
// files embedded in the binary, applied with tern. The worker applies them at
// start and `worker migrate` applies them on demand; tern takes an advisory
// lock, so workers starting together migrate once.
package migrations

import (
	"context"
	"embed"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/tern/v2/migrate"
)

//go:embed *.sql
var files embed.FS

// VersionTable records the applied schema version.
const VersionTable = "supportflow_schema_version"

// Migrate brings the database at conn up to the newest schema version and
// returns that version. It is safe to call concurrently and repeatedly.
func Migrate(ctx context.Context, conn *pgx.Conn) (int32, error) {
	m, err := migrate.NewMigrator(ctx, conn, VersionTable)
	if err != nil {
		return 0, fmt.Errorf("migrations: %w", err)
	}
	if err := m.LoadMigrations(files); err != nil {
		return 0, fmt.Errorf("migrations: load: %w", err)
	}
	if err := m.Migrate(ctx); err != nil {
		return 0, fmt.Errorf("migrations: apply: %w", err)
	}
	v, err := m.GetCurrentVersion(ctx)
	if err != nil {
		return 0, fmt.Errorf("migrations: read version: %w", err)
	}
	return v, nil
}

// migrateTo brings the database to exactly version v (up or down); the
// tests use it to check that a migration moves the rows of the schema
// before it.
func migrateTo(ctx context.Context, conn *pgx.Conn, v int32) error {
	m, err := migrate.NewMigrator(ctx, conn, VersionTable)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	if err := m.LoadMigrations(files); err != nil {
		return fmt.Errorf("migrations: load: %w", err)
	}
	return m.MigrateTo(ctx, v)
}

// MigrateURL connects to databaseURL, migrates and disconnects.
func MigrateURL(ctx context.Context, databaseURL string) (int32, error) {
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return 0, fmt.Errorf("migrations: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return Migrate(ctx, conn)
}
