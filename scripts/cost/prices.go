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
	priceFargateStorageGBHour = 0.000111     // Fargate ephemeral storage GB-hour, above the free 20 GB
	fargateFreeStorageGB      = 20.0         // the ephemeral storage every task gets free
	pricePublicIPv4Hour       = 0.005        // public IPv4 address-hour (the egress proxy's task; worker tasks have none)
	priceInterfaceEndpointHr  = 0.01         // VPC interface endpoint-hour, per AZ
	priceHostedZoneMonth      = 0.50         // Route 53 private hosted zone (the Cloud Map namespace's)
	priceCloudMapInstance     = 0.10         // Cloud Map registered instance-month
	priceLogsIngestPerGB      = 0.50         // CloudWatch Logs ingestion
	assumedLogMBPerWorkerHour = 6.0          // worker and flow log lines: assumed, not measured
	fixedPerMonth             = 12.91        // secrets, alarms, dashboard, metrics, Container Insights, ECR (docs/cost.md)
	hoursPerMonth             = 720.0

	// The workers' network (docs/cost.md, "The network"): four interface
	// endpoints (ECR API, ECR registry, CloudWatch Logs, Secrets
	// Manager) in each of the template's AZs, and the egress proxy's
	// task (0.25 vCPU, 0.5 GB, Arm) with its public address.
	interfaceEndpoints = 4
	proxyVCPU, proxyGB = 0.25, 0.5
	dnsFirewallMonth   = 0.01 // about 10 domain names
)

// What a parked worker costs (park.go) adds the snapshot bucket and the
// table's storage. S3 Standard in us-east-1: storage for the first 50 TB a
// month, PUT-class requests (PUT, COPY, POST, LIST; each part of a
// multipart upload is one, and so are its create and complete) and GETs;
// DELETE is free. Source: https://aws.amazon.com/s3/pricing/, as restated
// in 2025–2026 (docs/cost.md's table). DynamoDB's storage and PITR (on for
// galley's table) are docs/cost.md's row "DynamoDB storage / PITR".
const (
	priceS3StandardGBMonth    = 0.023  // GB-month, first 50 TB
	priceS3PutPer1000         = 0.005  // 1,000 PUT, COPY, POST or LIST requests
	priceS3GetPer1000         = 0.0004 // 1,000 GET requests
	priceDynamoStorageGBMonth = 0.25   // GB-month, standard table class
	priceDynamoPITRGBMonth    = 0.20   // GB-month of continuous backups
)

// networkPerMonth is the workers' network's fixed cost a month in azs
// availability zones.
func networkPerMonth(azs int) float64 {
	return float64(interfaceEndpoints*azs)*priceInterfaceEndpointHr*hoursPerMonth +
		(proxyVCPU*priceFargateVCPUHourArm+proxyGB*priceFargateGBHourArm+pricePublicIPv4Hour)*hoursPerMonth +
		priceHostedZoneMonth + priceCloudMapInstance + dnsFirewallMonth
}
