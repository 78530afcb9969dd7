"""A PySpark job run by test_spark_s3a.py in its own process: Spark 3.5 with hadoop-aws
over s3a against a blobstore gateway. Prints one JSON line of results on stdout.

argv: endpoint access_key secret_key bucket rows jars_dir scratch_dir

Spark's, the JVM's and Hadoop's local files (the s3a upload buffers among them) go to
scratch_dir, not the machine's temporary directory.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F


def main() -> None:
    endpoint, access_key, secret_key, bucket, rows, jars_dir, scratch = sys.argv[1:8]
    jars = ",".join(
        str(Path(jars_dir) / name)
        for name in ("hadoop-aws-3.3.1.jar", "aws-java-sdk-bundle-1.11.901.jar")
    )
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("blobstore-s3a-test")
        .config("spark.jars", jars)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.local.dir", scratch)
        .config("spark.driver.extraJavaOptions", f"-Djava.io.tmpdir={scratch}")
        .config("spark.hadoop.hadoop.tmp.dir", f"{scratch}/hadoop")
        .config("spark.hadoop.fs.s3a.impl", "org.apache.hadoop.fs.s3a.S3AFileSystem")
        .config("spark.hadoop.fs.s3a.endpoint", endpoint)
        .config("spark.hadoop.fs.s3a.path.style.access", "true")
        .config("spark.hadoop.fs.s3a.connection.ssl.enabled", "false")
        .config(
            "spark.hadoop.fs.s3a.aws.credentials.provider",
            "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        )
        .config("spark.hadoop.fs.s3a.access.key", access_key)
        .config("spark.hadoop.fs.s3a.secret.key", secret_key)
        .config("spark.hadoop.fs.s3a.multipart.size", "5M")
        .config("spark.hadoop.fs.s3a.multipart.threshold", "5M")
        .config("spark.hadoop.fs.s3a.fast.upload", "true")
        .config("spark.hadoop.fs.s3a.attempts.maximum", "3")
        .config("spark.hadoop.fs.s3a.retry.limit", "3")
        .config("spark.hadoop.fs.s3a.change.detection.mode", "none")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    try:
        csv = (
            spark.read.option("header", "true")
            .option("inferSchema", "true")
            .csv(f"s3a://{bucket}/input/people.csv")
        )
        csv_rows = sorted((r["name"], int(r["age"])) for r in csv.collect())

        frame = (
            spark.range(int(rows))
            .withColumn("digest", F.sha2(F.col("id").cast("string"), 256))
            .withColumn("bucket_of", F.col("id") % 7)
        )
        target = f"s3a://{bucket}/output/dataset.parquet"
        frame.coalesce(1).write.mode("overwrite").parquet(target)
        back = spark.read.parquet(target)
        summary = back.agg(
            F.count("*").alias("count"),
            F.sum("id").alias("id_sum"),
            F.countDistinct("digest").alias("distinct_digests"),
        ).collect()[0]
        per_bucket = {
            int(r["bucket_of"]): int(r["count"])
            for r in back.groupBy("bucket_of").count().collect()
        }
        print(
            json.dumps(
                {
                    "csv_rows": csv_rows,
                    "count": int(summary["count"]),
                    "id_sum": int(summary["id_sum"]),
                    "distinct_digests": int(summary["distinct_digests"]),
                    "per_bucket": per_bucket,
                }
            ),
            flush=True,
        )
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
