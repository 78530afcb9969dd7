# syntax=docker/dockerfile:1
# One image for every role of blobstore; the command picks the role:
#   docker run IMAGE bookie --zk ... | gateway --zk ... | autorecovery --zk ...
#                    maintain --zk ... | admin --zk ... bookies | --help
# It also holds what the Helm chart (helm/blobstore) runs besides `blobstore`: ZooKeeper
# (Debian's package, on Java 17) for the chart's ensemble, and PySpark (on the same Java)
# for the maintenance job, whose `spark-submit` drives executors of this same image.
#   docker build -t blobstore:0.1.0 .
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---------------------------------------------------------------- build: the venv
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
WORKDIR /src
COPY pyproject.toml ./
COPY bookie ./bookie
COPY blobstore ./blobstore
COPY s3api ./s3api
# The project with its pinned dependencies (pyproject.toml; PySpark among them, for the
# maintenance job).
RUN /opt/venv/bin/pip install . \
    && /opt/venv/bin/python -m compileall -q /opt/venv/lib
# The s3a jars (hadoop-aws 3.3.1 + aws-java-sdk-bundle 1.11.901, the pairing README.md
# names) from the sagemaker_pyspark 1.4.5 sdist, as scripts/setup.sh fetches
# them, into Spark's own jars: on the classpath of the driver and every executor.
RUN /opt/venv/bin/pip download -q --no-deps --no-binary :all: -d /tmp/s3a sagemaker_pyspark==1.4.5 \
    && tar -xzf /tmp/s3a/sagemaker_pyspark-1.4.5.tar.gz -C /tmp/s3a \
    && jars=/opt/venv/lib/python3.11/site-packages/pyspark/jars \
    && find /tmp/s3a -name hadoop-aws-3.3.1.jar -exec cp {} "$jars/" \; \
    && find /tmp/s3a -name aws-java-sdk-bundle-1.11.901.jar -exec cp {} "$jars/" \; \
    && test -f "$jars/hadoop-aws-3.3.1.jar" && test -f "$jars/aws-java-sdk-bundle-1.11.901.jar" \
    && rm -rf /tmp/s3a

# ---------------------------------------------------------------- runtime
FROM ${PYTHON_IMAGE}
# Java 17 (ZooKeeper and Spark) and ZooKeeper 3.8 from Debian (its jars in
# /usr/share/java, where `blobstore zookeeper` looks; zkCli.sh for operators). Slim images
# carry no man pages, yet the JRE's postinst links one: its directory must exist.
RUN mkdir -p /usr/share/man/man1 \
    && apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless zookeeper \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/venv /opt/venv
# The venv first on PATH: `blobstore`, `python`, `spark-submit` (`java` is Debian's).
# Assertions stay on (no PYTHONOPTIMIZE): bookies and gateways refuse to run without them.
ENV PATH=/opt/venv/bin:$PATH \
    SPARK_HOME=/opt/venv/lib/python3.11/site-packages/pyspark \
    PYSPARK_PYTHON=/opt/venv/bin/python \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN groupadd --gid 10001 blobstore \
    && useradd --uid 10001 --gid 10001 --create-home --home-dir /home/blobstore \
        --shell /usr/sbin/nologin blobstore \
    && mkdir -p /var/lib/blobstore /var/lib/zookeeper \
    && chown blobstore:blobstore /var/lib/blobstore /var/lib/zookeeper \
    && blobstore --help >/dev/null \
    && java -version \
    && ls /usr/share/java/zookeeper-3*.jar >/dev/null
USER 10001:10001
WORKDIR /home/blobstore
EXPOSE 2181 3181 8000 9000 9100
ENTRYPOINT ["blobstore"]
CMD ["--help"]
