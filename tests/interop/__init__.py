"""kohort beside other implementations: Apache Kafka (1 and 3 nodes, Java client and tools, its own
classes), kafkajs, librdkafka, kafka-python, aiokafka, kcat."""
