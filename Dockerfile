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
# MIMALLOC_PURGE_DELAY is not set here: the binary sets it for itself, per command (0 for
# the services, whose freed pages go back at once: the 1 M-row snapshot peaked at 65-82 MiB
# with mimalloc's default second; 10 ms for `sluice dump`, 10-13% faster); a value set in the
# pod's environment is kept.
# the chart's pod security context runs it as this non-root user, on a read-only root filesystem
USER 10001:10001
ENTRYPOINT ["/usr/local/bin/sluice"]
