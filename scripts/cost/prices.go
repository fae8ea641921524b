package main

// The prices the cost script multiplies its counts by: us-east-1 list
// prices, on-demand, no free tier, as docs/cost.md's price table states
// them; TestPricesMatchTheDocument keeps the two in step.
const pricesChecked = "2026-11-29"

const (
	priceAPIGatewayPerMillion = 1.00         // HTTP API requests (first 300 million)
	priceLambdaPerMillion     = 0.20         // Lambda requests
	priceLambdaGBSecondArm    = 0.0000133334 // Lambda duration, Arm
	priceDynamoWRUPerMillion  = 0.625        // DynamoDB on-demand write request units
	priceDynamoRRUPerMillion  = 0.125        // DynamoDB on-demand read request units
	priceSQSPerMillion        = 0.40         // SQS standard requests (empty receives included)
	priceSecretsPer10k        = 0.05         // Secrets Manager API calls
	priceFargateVCPUHourArm   = 0.03238      // Fargate Linux/Arm vCPU-hour
	priceFargateGBHourArm     = 0.00356      // Fargate Linux/Arm GB-hour
	pricePublicIPv4Hour       = 0.005        // public IPv4 address-hour (one per worker task)
	priceLogsIngestPerGB      = 0.50         // CloudWatch Logs ingestion
	assumedLogMBPerWorkerHour = 6.0          // worker and flow log lines: assumed, not measured
	fixedPerMonth             = 12.91        // secrets, alarms, dashboard, metrics, Container Insights, ECR (docs/cost.md)
	hoursPerMonth             = 720.0
)
