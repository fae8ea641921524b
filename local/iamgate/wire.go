package iamgate

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"net/http"
	"strings"

	"github.com/galley-run/galley/local/awswire"
)

// Service is an AWS service the gate can stand in front of.
type Service string

const (
	DynamoDB       Service = "dynamodb"
	SQS            Service = "sqs"
	SecretsManager Service = "secretsmanager"
	ECS            Service = "ecs"
	STS            Service = "sts"
	S3             Service = "s3"
)

// Services are the services the gate stands in front of.
var Services = []Service{DynamoDB, SQS, SecretsManager, ECS, STS, S3}

// STSNamespace is the XML namespace of STS's awsQuery answers.
const STSNamespace = "https://sts.amazonaws.com/doc/2011-06-15/"

// protocol is how one service speaks: its X-Amz-Target prefix, content
// type, and the shapes of its authorization errors.
type protocol struct {
	target      string // "DynamoDB_20120810."
	contentType string
	// denied is the AccessDenied error: status, __type, the message's key.
	deniedStatus int
	deniedType   string
	messageKey   string
	// queryCompatible services (SQS) also name the legacy query-protocol
	// code in x-amzn-query-error, which the SDK reports as ErrorCode().
	queryCompatible bool
	authStatus      int
	// lowerAction: SQS writes the action in lower case in its messages
	// ("sqs:sendmessage").
	lowerAction bool
	// query services (STS) speak awsQuery: a form-encoded POST naming its
	// operation in Action, answered in XML; errors are an ErrorResponse
	// with the query code, and a denial names no reason.
	query bool
	// rest services (S3) name their operation by method, path and query
	// (s3.go), and answer errors as S3's XML document.
	rest bool
}

var protocols = map[Service]protocol{
	// DynamoDB, awsJson1_0: HTTP 400, coral's namespaced type, "Message".
	DynamoDB: {
		target: "DynamoDB_20120810.", contentType: awswire.ContentTypeJSON10,
		deniedStatus: 400, deniedType: "com.amazon.coral.service#AccessDeniedException", messageKey: "Message",
		authStatus: 400,
	},
	// SQS, awsJson1_0 with awsQueryCompatible: a denial is HTTP 403 with
	// x-amzn-query-error "AccessDenied;Sender", so the SDK's ErrorCode() is
	// "AccessDenied" as in the query protocol.
	SQS: {
		target: "AmazonSQS.", contentType: awswire.ContentTypeJSON10,
		deniedStatus: 403, deniedType: "com.amazon.coral.service#AccessDeniedException", messageKey: "Message",
		queryCompatible: true, authStatus: 403, lowerAction: true,
	},
	SecretsManager: {
		target: "secretsmanager.", contentType: awswire.ContentTypeJSON11,
		deniedStatus: 400, deniedType: "AccessDeniedException", messageKey: "Message",
		authStatus: 400,
	},
	ECS: {
		target: "AmazonEC2ContainerServiceV20141113.", contentType: awswire.ContentTypeJSON11,
		deniedStatus: 400, deniedType: "AccessDeniedException", messageKey: "message",
		authStatus: 400,
	},
	// STS, awsQuery: <ErrorResponse> in XML; AccessDenied and the
	// authentication errors are HTTP 403.
	STS: {
		contentType:  "text/xml",
		deniedStatus: 403, deniedType: "AccessDenied",
		authStatus: 403, query: true,
	},
	// S3, REST with XML errors: a denial is HTTP 403 AccessDenied, with
	// the IAM reason as S3 now gives it.
	S3: {
		contentType:  "application/xml",
		deniedStatus: 403, deniedType: "AccessDenied",
		authStatus: 403, rest: true,
	},
}

// awsError is one error answer.
type awsError struct {
	status    int
	typ       string // __type
	key       string // "message" or "Message"
	queryCode string // for x-amzn-query-error, without ";Sender"
	message   string
}

// Authentication errors, shared by the coral-based JSON services; the
// query code is what SQS's query protocol answered (and its JSON protocol
// still names in x-amzn-query-error).
func (p protocol) authError(typ, queryCode, msg string) awsError {
	return awsError{status: p.authStatus, typ: "com.amazon.coral.service#" + typ, key: "message", queryCode: queryCode, message: msg}
}

func (p protocol) unrecognizedClient() awsError {
	return p.authError("UnrecognizedClientException", "InvalidClientTokenId", "The security token included in the request is invalid.")
}

func (p protocol) invalidSignature(msg string) awsError {
	return p.authError("InvalidSignatureException", "SignatureDoesNotMatch", msg)
}

func (p protocol) missingToken() awsError {
	return p.authError("MissingAuthenticationTokenException", "MissingAuthenticationToken", "Request is missing Authentication Token")
}

func (p protocol) incompleteSignature(msg string) awsError {
	return p.authError("IncompleteSignatureException", "IncompleteSignature", msg)
}

// expiredToken answers a request signed with temporary credentials past
// their expiration: ExpiredTokenException in the JSON services,
// ExpiredToken in the query protocol (SQS's x-amzn-query-error, STS).
func (p protocol) expiredToken() awsError {
	return p.authError("ExpiredTokenException", "ExpiredToken", "The security token included in the request is expired")
}

// denial is why a request was denied, for the message's last words.
type denial int

const (
	noIdentityAllow denial = iota // no identity-based policy allows it
	identityDeny                  // an identity-based policy denies it
	noSessionAllow                // the session policy does not allow it
	sessionDeny                   // the session policy denies it
)

// denied is the AccessDenied answer for a caller, an action and the
// resource as the service names it in its message, with AWS's words for
// why (https://docs.aws.amazon.com/IAM/latest/UserGuide/troubleshoot_access-denied.html).
// STS names no reason: its denial of sts:AssumeRole reads the same whether
// the caller's policies or the role's trust policy refused.
func (p protocol) denied(caller, action, resource string, why denial) awsError {
	if p.lowerAction {
		action = strings.ToLower(action)
	}
	msg := fmt.Sprintf("User: %s is not authorized to perform: %s on resource: %s", caller, action, resource)
	if !p.query {
		switch why {
		case identityDeny:
			msg += " with an explicit deny in an identity-based policy"
		case sessionDeny:
			msg += " with an explicit deny in a session policy"
		case noSessionAllow:
			msg += " because no session policy allows the " + action + " action"
		default:
			msg += " because no identity-based policy allows the " + action + " action"
		}
	}
	return awsError{status: p.deniedStatus, typ: p.deniedType, key: p.messageKey, queryCode: "AccessDenied", message: msg}
}

// refused answers a request the gate cannot authorize because it cannot
// map it (an unknown or unmodelled operation, a body it cannot read).
func (p protocol) refused(typ, msg string) awsError {
	return awsError{status: 400, typ: typ, key: "message", queryCode: typ, message: msg}
}

func (p protocol) write(w http.ResponseWriter, e awsError) {
	if p.rest {
		writeS3Error(w, e)
		return
	}
	if p.query {
		writeQueryError(w, e)
		return
	}
	h := w.Header()
	h.Set("Content-Type", p.contentType)
	h.Set("X-Amzn-RequestId", awswire.UUID())
	if p.queryCompatible && e.queryCode != "" {
		h.Set("X-Amzn-Query-Error", e.queryCode+";Sender")
	}
	b, _ := json.Marshal(map[string]string{"__type": e.typ, e.key: e.message})
	w.WriteHeader(e.status)
	_, _ = w.Write(b)
}

// QueryError is awsQuery's error answer (STS's), as the gate and the STS
// stand-in write it.
type QueryError struct {
	XMLName   xml.Name `xml:"ErrorResponse"`
	Xmlns     string   `xml:"xmlns,attr"`
	Type      string   `xml:"Error>Type"`
	Code      string   `xml:"Error>Code"`
	Message   string   `xml:"Error>Message"`
	RequestID string   `xml:"RequestId"`
}

// writeQueryError answers e as STS does: the query code (the JSON
// services' __type without its namespace where e has none).
func writeQueryError(w http.ResponseWriter, e awsError) {
	code := e.queryCode
	if code == "" {
		code = e.typ[strings.LastIndex(e.typ, "#")+1:]
	}
	id := awswire.UUID()
	b, _ := xml.Marshal(QueryError{Xmlns: STSNamespace, Type: "Sender", Code: code, Message: e.message, RequestID: id})
	w.Header().Set("Content-Type", "text/xml")
	w.Header().Set("X-Amzn-RequestId", id)
	w.WriteHeader(e.status)
	_, _ = w.Write(append([]byte(xml.Header), b...))
}
