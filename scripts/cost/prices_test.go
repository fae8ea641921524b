package main

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// The price table of docs/cost.md and the prices the script multiplies by
// are one table written twice: this keeps them in step.
func TestPricesMatchTheDocument(t *testing.T) {
	b, err := os.ReadFile("../../docs/cost.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	if !strings.Contains(doc, "checked on **"+pricesChecked+"**") {
		t.Errorf("docs/cost.md does not say the prices were checked on %s", pricesChecked)
	}
	// The first price cell of each row of the table ("$0.20", or "$0.40 +
	// $0.05" where the row has two), by the row's first cell.
	cells := map[string][]string{}
	for _, line := range strings.Split(doc, "\n") {
		f := strings.Split(line, "|")
		if len(f) < 4 || !strings.HasPrefix(strings.TrimSpace(f[2]), "$") {
			continue
		}
		name := strings.TrimSpace(f[1])
		if _, seen := cells[name]; seen {
			continue // the price table comes first
		}
		for _, p := range strings.Split(strings.ReplaceAll(f[2], " / ", "+"), "+") {
			cells[name] = append(cells[name], strings.TrimPrefix(strings.TrimSpace(p), "$"))
		}
	}
	for _, tc := range []struct {
		row   string
		index int
		price float64
	}{
		{"Lambda duration, Arm", 0, priceLambdaGBSecondArm},
		{"Lambda requests", 0, priceLambdaPerMillion},
		{"API Gateway HTTP API", 0, priceAPIGatewayPerMillion},
		{"DynamoDB on-demand writes", 0, priceDynamoWRUPerMillion},
		{"DynamoDB on-demand reads", 0, priceDynamoRRUPerMillion},
		{"SQS standard", 0, priceSQSPerMillion},
		{"Fargate Linux/Arm vCPU", 0, priceFargateVCPUHourArm},
		{"Fargate Linux/Arm memory", 0, priceFargateGBHourArm},
		{"Fargate ephemeral storage over 20 GB", 0, priceFargateStorageGBHour},
		{"Public IPv4 address", 0, pricePublicIPv4Hour},
		{"VPC interface endpoint", 0, priceInterfaceEndpointHr},
		{"Route 53 private hosted zone", 0, priceHostedZoneMonth},
		{"Cloud Map", 0, priceCloudMapInstance},
		{"CloudWatch Logs ingestion", 0, priceLogsIngestPerGB},
		{"Secrets Manager", 1, priceSecretsPer10k},
		{"DynamoDB storage / PITR", 0, priceDynamoStorageGBMonth},
		{"DynamoDB storage / PITR", 1, priceDynamoPITRGBMonth},
		{"S3 Standard storage", 0, priceS3StandardGBMonth},
		{"S3 PUT, COPY, POST, LIST", 0, priceS3PutPer1000},
		{"S3 GET", 0, priceS3GetPer1000},
	} {
		c := cells[tc.row]
		if len(c) <= tc.index {
			t.Errorf("docs/cost.md has no price for %q", tc.row)
			continue
		}
		v, err := strconv.ParseFloat(c[tc.index], 64)
		if err != nil || v != tc.price {
			t.Errorf("docs/cost.md prices %q at %q, the script at %v", tc.row, c[tc.index], tc.price)
		}
	}
}

// The network's fixed month the script adds is the one docs/cost.md
// states for two AZs and for one.
func TestNetworkMatchesTheDocument(t *testing.T) {
	b, err := os.ReadFile("../../docs/cost.md")
	if err != nil {
		t.Fatal(err)
	}
	for azs, want := range map[int]string{2: "68.92", 1: "40.12"} {
		got := strconv.FormatFloat(networkPerMonth(azs), 'f', 2, 64)
		if got != want || !strings.Contains(string(b), "**"+want+"**") {
			t.Errorf("the network in %d AZs: the script says %s, docs/cost.md %s", azs, got, want)
		}
	}
}
