"""AWS adapters: OpenSearch, S3, DynamoDB, Bedrock, Step Functions."""
