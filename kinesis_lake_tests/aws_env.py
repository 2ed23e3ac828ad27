"""Placeholder AWS credentials and region for every test and every process a test starts:
nothing may reach a real account, profile or metadata service."""

FAKE_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "kinesis-lake-test",
    "AWS_SECRET_ACCESS_KEY": "kinesis-lake-test",
    "AWS_REGION": "us-east-1",
    "AWS_DEFAULT_REGION": "us-east-1",
    # Keep boto3 away from any profile or instance metadata on the test machine.
    "AWS_EC2_METADATA_DISABLED": "true",
}
