"""Calendar providers (DESIGN section 6, "Providers"): the shipped adapters of the
``CalendarProvider`` port (engine/provider_ports.py) and what they share.
``ical`` reads a calendar's iCalendar data into busy time (recurrences expanded,
time zones checked, hostile input bounded) and renders slotward's own event; ``ics``
reads an ICS URL or file by conditional GET; ``caldav`` speaks RFC 4791. With
adapters/webhooks/sender.py, this is the only package that opens HTTP clients, each
through the SSRF guard (adapters/webhooks/resolver.py). Import the modules themselves.
"""
