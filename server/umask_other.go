//go:build !unix

package server

func setPrivateUmask() {}
