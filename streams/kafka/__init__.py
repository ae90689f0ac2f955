"""The Kafka shell: the faust worker, its bulk consumer, tables, topics and Redis cache."""
