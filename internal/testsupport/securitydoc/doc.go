// Package securitydoc holds the test that keeps SECURITY.md honest: every
// test the page cites as evidence for a claim exists, and for some claims
// the cited test fails against a counter-example of the claim (a build tag
// that breaks the mechanism the claim rests on).
package securitydoc
