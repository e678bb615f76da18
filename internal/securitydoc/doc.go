// Package securitydoc holds the test that keeps SECURITY.md honest: every
// test the page cites as evidence for a claim exists.
package securitydoc
