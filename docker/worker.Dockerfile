# docker/worker.Dockerfile - image of the example click worker (click_worker.py) that
# compose.yaml and k8s-sidecar.yaml run beside bloomd. Build from the repository root.
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin
COPY clients/python/src/bloomd_client /opt/bloomd/bloomd_client
COPY docker/click_worker.py /opt/bloomd/click_worker.py
ENV PYTHONPATH=/opt/bloomd PYTHONUNBUFFERED=1
USER nobody
ENTRYPOINT ["python3", "/opt/bloomd/click_worker.py"]
