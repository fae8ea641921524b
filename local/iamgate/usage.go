package iamgate

import (
	"bytes"
	"encoding/json"
	"hash/crc32"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
)

// Call is one request the gate authorized, with what AWS bills for it:
// what a cost model counts (WithUsage).
type Call struct {
	Service   Service
	Operation string // "PutItem"
	Role      string // the caller's role ARN
	Status    int    // the HTTP status of the answer
	// EmptyReceive: an SQS ReceiveMessage answered with no message (SQS
	// bills it as any other request).
	EmptyReceive bool
	// Capacity is what a DynamoDB request consumed, by table.
	Capacity []Capacity
}

// Capacity is the DynamoDB capacity one request consumed on one table
// (its indexes included), in read and write request units.
type Capacity struct {
	Table       string
	Read, Write float64
	// Estimated: DynamoDB (Local, and AWS too) reports nothing for a
	// request that failed its condition, which AWS bills all the same;
	// the gate bills it as docs/aws-local.md says.
	Estimated bool
}

// WithUsage calls f once for every request the gate authorized, after its
// answer (an SQS long poll: when it ends), with what AWS bills for it. For
// DynamoDB the gate asks the stand-in for ReturnConsumedCapacity TOTAL
// when the caller did not ask for it, and takes ConsumedCapacity out of the
// answer again, so the caller sees what AWS would answer it. f must not
// block.
func WithUsage(f func(Call)) Option { return func(g *Gate) { g.usage = f } }

// capacityOps are DynamoDB's operations that take ReturnConsumedCapacity,
// and whether each reads (RRU) or writes (WRU).
var capacityOps = map[string]bool{
	"GetItem": false, "Query": false, "Scan": false, "BatchGetItem": false, "TransactGetItems": false,
	"PutItem": true, "UpdateItem": true, "DeleteItem": true, "BatchWriteItem": true, "TransactWriteItems": true,
}

// serveCounted passes an authorized request upstream and reports its Call.
func (g *Gate) serveCounted(w http.ResponseWriter, r *http.Request, p Principal, op string, body []byte) {
	call := Call{Service: g.service, Operation: op, Role: p.RoleARN}
	write, measured := capacityOps[op]
	measured = measured && g.service == DynamoDB
	var req map[string]json.RawMessage
	asked := false
	if measured {
		if json.Unmarshal(body, &req) != nil {
			measured = false // the stand-in answers the malformed body as AWS does
		} else {
			// Asked for only when absent or NONE: any other value is the
			// caller's to have refused or answered as it stands.
			// DynamoDB reads member names regardless of case.
			var raw json.RawMessage
			given := false
			for k, v := range req {
				if strings.EqualFold(k, "ReturnConsumedCapacity") {
					raw, given = v, true
				}
			}
			asked = given && string(bytes.TrimSpace(raw)) != `"NONE"`
			if given && !asked {
				for k := range req {
					if strings.EqualFold(k, "ReturnConsumedCapacity") {
						delete(req, k)
					}
				}
			}
			if !asked {
				req["ReturnConsumedCapacity"] = json.RawMessage(`"TOTAL"`)
				body, _ = json.Marshal(req)
			}
		}
	}
	r.Body = readCloser{bytes.NewReader(body)}
	r.ContentLength = int64(len(body))
	r.Header.Set("Content-Length", strconv.Itoa(len(body)))
	// The gate reads the answer: let the transport ask for (and undo) any
	// compression itself.
	r.Header.Del("Accept-Encoding")
	rec := httptest.NewRecorder()
	g.upstream.ServeHTTP(rec, r)
	resp := rec.Result()
	out := rec.Body.Bytes()
	call.Status = resp.StatusCode

	switch {
	case g.service == SQS && op == "ReceiveMessage" && resp.StatusCode == http.StatusOK:
		var m struct{ Messages []json.RawMessage }
		call.EmptyReceive = json.Unmarshal(out, &m) == nil && len(m.Messages) == 0
	case measured:
		var answer map[string]json.RawMessage
		if json.Unmarshal(out, &answer) == nil {
			if resp.StatusCode == http.StatusOK {
				call.Capacity = consumed(answer["ConsumedCapacity"], write, op, req)
				if !asked && answer["ConsumedCapacity"] != nil {
					delete(answer, "ConsumedCapacity")
					out, _ = json.Marshal(answer)
				}
			} else {
				call.Capacity = failedCondition(answer, op, req)
			}
		}
	}

	h := w.Header()
	for k, v := range resp.Header {
		h[k] = v
	}
	if resp.Header.Get("X-Amz-Crc32") != "" {
		h.Set("X-Amz-Crc32", strconv.FormatUint(uint64(crc32.ChecksumIEEE(out)), 10))
	}
	h.Set("Content-Length", strconv.Itoa(len(out)))
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(out)
	if g.usage != nil {
		g.usage(call)
	}
}

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }

// consumed reads ConsumedCapacity (one object, or a list for batches and
// transactions). A read that found nothing is billed AWS's minimum (half
// a unit, a whole one strongly consistent) where DynamoDB Local reports 0.
func consumed(raw json.RawMessage, write bool, op string, req map[string]json.RawMessage) []Capacity {
	type entry struct {
		TableName     string
		CapacityUnits float64
	}
	var list []entry
	if len(raw) > 0 && raw[0] == '[' {
		_ = json.Unmarshal(raw, &list)
	} else if len(raw) > 0 {
		var e entry
		if json.Unmarshal(raw, &e) == nil {
			list = append(list, e)
		}
	}
	var out []Capacity
	for _, e := range list {
		c := Capacity{Table: e.TableName}
		units := e.CapacityUnits
		if !write && units == 0 && (op == "GetItem" || op == "Query" || op == "Scan") {
			var strong bool
			_ = json.Unmarshal(req["ConsistentRead"], &strong)
			units = 0.5
			if strong {
				units = 1
			}
		}
		if write {
			c.Write = units
		} else {
			c.Read = units
		}
		out = append(out, c)
	}
	return out
}

// failedCondition is what AWS bills for a write that failed its condition
// (ConditionalCheckFailedException) or a transaction cancelled by one
// (TransactionCanceledException): DynamoDB reports no consumed capacity
// then, yet bills the write. The gate bills one unit per item written
// (galley's items are under 1 KB), twice that in a transaction, whose
// items are all billed.
func failedCondition(answer map[string]json.RawMessage, op string, req map[string]json.RawMessage) []Capacity {
	var typ string
	_ = json.Unmarshal(answer["__type"], &typ)
	switch {
	case op == "PutItem" || op == "UpdateItem" || op == "DeleteItem":
		if !strings.HasSuffix(typ, "ConditionalCheckFailedException") {
			return nil
		}
		var table string
		_ = json.Unmarshal(req["TableName"], &table)
		return []Capacity{{Table: table, Write: 1, Estimated: true}}
	case op == "TransactWriteItems" || op == "TransactGetItems":
		if !strings.HasSuffix(typ, "TransactionCanceledException") {
			return nil
		}
		var items []map[string]struct{ TableName string }
		_ = json.Unmarshal(req["TransactItems"], &items)
		byTable := map[string]float64{}
		var order []string
		for _, it := range items {
			for _, v := range it {
				if _, ok := byTable[v.TableName]; !ok {
					order = append(order, v.TableName)
				}
				byTable[v.TableName] += 2
			}
		}
		var out []Capacity
		for _, t := range order {
			c := Capacity{Table: t, Estimated: true}
			if op == "TransactWriteItems" {
				c.Write = byTable[t]
			} else {
				c.Read = byTable[t]
			}
			out = append(out, c)
		}
		return out
	}
	return nil
}
