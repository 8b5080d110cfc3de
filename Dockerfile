# The image the Helm chart (helm/sluice) runs: `docker build -t sluice:0.1.0 .`
# Not built by this repository's CI: no container engine runs on its machines (the chart is
# checked by integration/helm_check.sh, the binary by make test).
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
# librdkafka is built from source by rdkafka-sys (a C toolchain, make and libssl-dev are in the
# rust image); it links OpenSSL for TLS and SASL SCRAM to Kafka (libssl3 in the runtime image)
RUN cargo build --release --locked --bin sluice && cp target/release/sluice /sluice

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates libssl3 \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /sluice /usr/local/bin/sluice
# no transparent huge pages for the allocator, also on hosts where THP is "always": a 2 MiB page
# per touched region kept peak RSS about 40% higher (bench/README.md, "Memory")
ENV MIMALLOC_ALLOW_THP=0
# pages freed by another thread than the one that took them (a snapshot's rows are read on a
# task of their own and freed by the pipeline) given back at once, not after mimalloc's default
# second: the 1 M-row snapshot peaked at 65-82 MiB without this, 56.5 MiB with it, at no
# measurable cost in time (bench/README.md, "The snapshot's memory"). The binary sets it for
# itself when it is unset (by running itself again); set here, it starts once.
ENV MIMALLOC_PURGE_DELAY=0
# the chart's pod security context runs it as this non-root user, on a read-only root filesystem
USER 10001:10001
ENTRYPOINT ["/usr/local/bin/sluice"]
