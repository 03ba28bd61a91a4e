// Command bench measures what supportflow costs per job on this machine,
// side by side with the engine's floor (a no-op one-activity Temporal
// workflow on the same dev server) and a plain Postgres job queue (River
// on the same PostgreSQL). It is its own module, so River stays out of the
// product's go.mod.
//
//	go -C bench run .            the full run (a few minutes), a table and bench-results.json
//	go -C bench run . -size tiny a quick run, as the test does
package main
