// Package deploy has no code, only tests. They check the deployment files at
// the repository root (docker-compose.yml, Dockerfile, .dockerignore)
// against what the worker actually reads, so a renamed, misspelled or
// missing variable fails `go test` instead of a deploy. No Docker engine is
// needed: the compose file is loaded and validated with compose-go, the
// library docker compose itself uses.
package deploy
