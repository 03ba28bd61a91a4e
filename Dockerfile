# The supportflow image: the worker (`worker`, `worker migrate`,
# `worker probe URL`), the HTTP API (`supportflow-api`), the codec gateway
# (`codec-gateway`) and the operators' command (`starter`, e.g.
# `starter ensure-schedules`).
# `docker compose build` builds it for every supportflow service; on its own:
# docker build -t supportflow .
#
# The entrypoint is the worker, so `docker run IMAGE migrate` applies
# migrations and exits, and `docker run IMAGE --help` lists every variable.
# The starter runs with the entrypoint replaced:
# docker run --entrypoint /usr/local/bin/starter IMAGE ensure-schedules

FROM golang:1.26-bookworm AS build
WORKDIR /src

# Modules first: a change to the sources alone reuses this layer.
COPY go.mod go.sum ./
RUN go mod download

COPY . .
# CGO off gives static binaries that need no libc in the final image;
# -trimpath keeps the build machine's paths out of them. The SQL migrations
# are embedded in the worker, so nothing else is copied to the final stage.
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/ ./worker ./cmd/supportflow-api ./cmd/codec-gateway ./cmd/starter

# distroless/static carries CA certificates (for Zendesk, the subscription
# service and Temporal Cloud over TLS) and tzdata, no shell, and runs as uid
# 65532.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/worker /out/supportflow-api /out/codec-gateway /out/starter /usr/local/bin/
USER nonroot:nonroot
# Exec form, so the worker is PID 1 and receives SIGTERM itself to drain.
ENTRYPOINT ["/usr/local/bin/worker"]
