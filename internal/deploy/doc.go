// Package deploy has no code, only tests. They check the deployment files
// (docker-compose.yml and deploy/compose/, the Dockerfile, .dockerignore,
// deploy/caddy/Caddyfile, deploy/postgres/ and deploy/temporal/ scripts, and
// the Kustomize tree in deploy/kubernetes/) against what the code actually
// reads and serves, so a renamed, misspelled or missing variable, a probe on
// a path nothing serves or a secret passed in the clear fails `go test`
// instead of a deploy.
//
// No Docker engine, kubectl or kustomize binary is needed: the compose files
// are loaded and validated with compose-go (the library docker compose
// uses), the Kustomize overlays are built with kustomize's own Go API and
// decoded strictly into the Kubernetes API types, and the configuration each
// container would get is run through supportflow's own loaders, with every
// mounted secret replaced by a fixture file.
package deploy
