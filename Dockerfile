# tunefleet images. Targets:
#   gpu-worker:        CUDA measurement worker (nvcc; run with the NVIDIA container runtime)
#   service (default, the last stage): server, tuner and CPU measurement worker (gcc for
#                      candidate builds)
# Build: docker build -t tunefleet .   /   docker build --target gpu-worker -t tunefleet-gpu .
# Each image installs tunefleet's wheel (built once, in the `wheel` stage) non-editably, as a
# user and tests/test_wheel.py do, with the extras its processes need.

FROM python:3.11-slim-bookworm AS wheel
WORKDIR /src
# the source tree, less what .dockerignore leaves out (tests, benchmarks, virtual environments)
COPY . .
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM nvidia/cuda:12.6.3-devel-ubuntu24.04 AS gpu-worker
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv gcc g++ \
    && rm -rf /var/lib/apt/lists/*
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PATH=/opt/venv/bin:$PATH \
    TUNEFLEET_HOME=/data TUNEFLEET_LOG_FORMAT=json
COPY --from=wheel /wheels /wheels
# A worker host needs the compiler and the worker only: no SQL, XGBoost or web framework.
RUN python3 -m venv /opt/venv && pip install --no-cache-dir "$(echo /wheels/tunefleet-*.whl)[worker]"
RUN useradd --create-home --uid 1001 tunefleet && mkdir /data && chown tunefleet /data
USER tunefleet
WORKDIR /data
CMD ["tunefleet", "worker"]

FROM python:3.11-slim-bookworm AS service
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    TUNEFLEET_HOME=/data TUNEFLEET_HOST=0.0.0.0 TUNEFLEET_LOG_FORMAT=json
COPY --from=wheel /wheels /wheels
RUN pip install --no-cache-dir "$(echo /wheels/tunefleet-*.whl)[all]"
RUN useradd --create-home --uid 1000 tunefleet && mkdir /data && chown tunefleet /data
USER tunefleet
WORKDIR /data
VOLUME /data
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/api/v1/healthz')" || exit 1
CMD ["sh", "-c", "tunefleet db upgrade && tunefleet server"]
