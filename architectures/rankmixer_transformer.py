"""(placeholder, being written)"""
