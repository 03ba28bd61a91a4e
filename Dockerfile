# The supportflow worker image. `docker compose build` builds it for the
# worker service; on its own: docker build -t supportflow-worker .
#
# The image's entrypoint is the worker, so `docker run IMAGE migrate` applies
# migrations and exits, and `docker run IMAGE --help` lists every variable.

FROM golang:1.26-bookworm AS build
WORKDIR /src

# Modules first: a change to the sources alone reuses this layer.
COPY go.mod go.sum ./
RUN go mod download

COPY . .
# CGO off gives a static binary that needs no libc in the final image;
# -trimpath keeps the build machine's paths out of it. The SQL migrations are
# embedded in the binary, so nothing else is copied to the final stage.
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/worker ./worker

# distroless/static carries CA certificates (for Zendesk and the subscription
# service over HTTPS) and tzdata, no shell, and runs as uid 65532.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/worker /usr/local/bin/worker
USER nonroot:nonroot
# Exec form, so the worker is PID 1 and receives SIGTERM itself to drain.
ENTRYPOINT ["/usr/local/bin/worker"]
