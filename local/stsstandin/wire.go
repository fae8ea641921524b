package stsstandin

import (
	"encoding/xml"
	"fmt"
	"net/http"
	"strings"

	"github.com/galley-run/galley/local/awswire"
	"github.com/galley-run/galley/local/iamgate"
)

type assumeRoleResponse struct {
	XMLName xml.Name `xml:"AssumeRoleResponse"`
	Xmlns   string   `xml:"xmlns,attr"`
	Result  struct {
		Credentials struct {
			AccessKeyID     string `xml:"AccessKeyId"`
			SecretAccessKey string `xml:"SecretAccessKey"`
			SessionToken    string `xml:"SessionToken"`
			Expiration      string `xml:"Expiration"`
		} `xml:"Credentials"`
		AssumedRoleUser struct {
			Arn           string `xml:"Arn"`
			AssumedRoleID string `xml:"AssumedRoleId"`
		} `xml:"AssumedRoleUser"`
		// PackedPolicySize is sent when the request passed a policy.
		PackedPolicySize *int `xml:"PackedPolicySize,omitempty"`
	} `xml:"AssumeRoleResult"`
	RequestID string `xml:"ResponseMetadata>RequestId"`
}

type getCallerIdentityResponse struct {
	XMLName xml.Name `xml:"GetCallerIdentityResponse"`
	Xmlns   string   `xml:"xmlns,attr"`
	Result  struct {
		Arn     string `xml:"Arn"`
		UserID  string `xml:"UserId"`
		Account string `xml:"Account"`
	} `xml:"GetCallerIdentityResult"`
	RequestID string `xml:"ResponseMetadata>RequestId"`
}

// apiError is one error answer: its HTTP status, query code and message.
type apiError struct {
	status  int
	code    string
	message string
}

var errMissingAuth = apiError{http.StatusForbidden, "MissingAuthenticationToken", "Request is missing Authentication Token"}

func validation(msg string) apiError {
	return apiError{http.StatusBadRequest, "ValidationError", msg}
}

// constraintErrors joins the failed constraints as AWS reports them: "1
// validation error detected: ...", "2 validation errors detected: ...; ...".
func constraintErrors(msgs []string) *apiError {
	if len(msgs) == 0 {
		return nil
	}
	s := "s"
	if len(msgs) == 1 {
		s = ""
	}
	e := validation(fmt.Sprintf("%d validation error%s detected: %s", len(msgs), s, strings.Join(msgs, "; ")))
	return &e
}

func writeError(w http.ResponseWriter, e apiError) {
	id := awswire.UUID()
	typ := "Sender"
	if e.status >= 500 {
		typ = "Receiver"
	}
	b, _ := xml.Marshal(iamgate.QueryError{Xmlns: Namespace, Type: typ, Code: e.code, Message: e.message, RequestID: id})
	w.Header().Set("Content-Type", "text/xml")
	w.Header().Set("X-Amzn-RequestId", id)
	w.WriteHeader(e.status)
	_, _ = w.Write(append([]byte(xml.Header), b...))
}
