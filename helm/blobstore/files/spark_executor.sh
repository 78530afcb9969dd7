#!/bin/bash
# A Spark executor of the maintenance job on Kubernetes: the command of the executor pod
# template (spark.kubernetes.executor.podTemplateFile). Spark's driver starts executor
# pods with the argument `executor` and describes the executor in SPARK_* variables;
# Spark's own images turn those into a JVM command in their entrypoint. This image's
# entrypoint is `blobstore`, so the pod template runs this script instead, which starts
# the same KubernetesExecutorBackend from the PySpark installed in the image.
set -euo pipefail
if [ "${1:-}" != executor ]; then
    echo "spark_executor.sh: expected the argument 'executor', got: $*" >&2
    exit 2
fi
spark_home=${SPARK_HOME:?SPARK_HOME is set by the image}
# JVM options from the driver (spark.executor.extraJavaOptions and Java 17's module
# options) come as SPARK_JAVA_OPT_0, SPARK_JAVA_OPT_1, ... in that order.
java_opts=()
while IFS= read -r name; do
    java_opts+=("${!name}")
done < <(compgen -e | grep '^SPARK_JAVA_OPT_' | sort -t_ -k4 -n)
classpath="$spark_home/jars/*${SPARK_CLASSPATH:+:$SPARK_CLASSPATH}"
exec "${JAVA_HOME:+$JAVA_HOME/bin/}java" "${java_opts[@]}" \
    -Xms"$SPARK_EXECUTOR_MEMORY" -Xmx"$SPARK_EXECUTOR_MEMORY" -cp "$classpath" \
    org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
    --driver-url "$SPARK_DRIVER_URL" \
    --executor-id "$SPARK_EXECUTOR_ID" \
    --cores "$SPARK_EXECUTOR_CORES" \
    --app-id "$SPARK_APPLICATION_ID" \
    --hostname "$SPARK_EXECUTOR_POD_IP" \
    --resourceProfileId "$SPARK_RESOURCE_PROFILE_ID" \
    --podName "$SPARK_EXECUTOR_POD_NAME"
