"""Users for `rollkit eval --user helpers.users_helpers:NAME` in the tests."""

from rollkit.examples import toy_customer

CUSTOMER = toy_customer()
NOT_A_USER = 3
