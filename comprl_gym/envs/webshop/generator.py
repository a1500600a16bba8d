"""A generated WebShop catalog in exactly the official file schema (the offline default).

The official product files live on a drive many cannot reach, so the default catalog is made
here: products over the original's five categories (beauty, grocery, fashion, garden
furniture, electronics) with brands, titles, bullet points, descriptions, option groups,
attributes, prices and reviews, plus human-style instructions ("i am looking for ..."), each
written from one real product so buying that product with the named options scores 1.0.

Files written (the official names, so :func:`~comprl_gym.envs.webshop.catalog.load_catalog`
reads them like the real ones): ``items_shuffle_1000.json``, ``items_ins_v2_1000.json``,
``items_human_ins.json``, ``reviews.json``. Generation is deterministic (``random.Random``)
and takes well under a second; files are cached under
``cache_dir("webshop", f"catalog-v{CATALOG_VERSION}")``.

Example:
    >>> products, attributes, human, reviews = generate_catalog(num_products=50, seed=1)
    >>> len(products), products[0]["category"] in ("beauty", "grocery", "fashion", "garden",
    ...                                            "electronics")
    (50, True)
"""

from __future__ import annotations

import functools
import json
import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from comprl_gym.utils import atomic_write_text, cache_dir

logger = logging.getLogger(__name__)

#: Bump when the generator's output changes: the cache folder is keyed by it.
CATALOG_VERSION = 1
DEFAULT_NUM_PRODUCTS = 1000
#: Products with a second human instruction: 1,000 products give 2,500 goals, enough for the
#: original split ranges (test 0-500, valid 500-1500, train 1500-).
INSTRUCTIONS_PER_PRODUCT = (2, 3)


@dataclass(frozen=True)
class ProductType:
    """One kind of product: how it is searched, filed, named, described and varied."""

    category: str
    query: str
    path: str
    nouns: tuple[str, ...]
    attributes: tuple[str, ...]
    options: tuple[tuple[str, tuple[str, ...]], ...]
    price: tuple[float, float]
    details: tuple[str, ...]


_COLORS = (
    "black",
    "white",
    "navy blue",
    "grey",
    "red",
    "olive green",
    "beige",
    "pink",
    "royal blue",
    "brown",
    "burgundy",
    "light purple",
    "khaki",
    "teal",
)
_CLOTHING_SIZES = ("x-small", "small", "medium", "large", "x-large", "xx-large", "3x-large")
_SHOE_SIZES = ("6", "6.5", "7", "7.5", "8", "8.5", "9", "9.5", "10", "10.5", "11", "12")
_PACKS = (
    "1 count (pack of 1)",
    "2 count (pack of 2)",
    "3 count (pack of 3)",
    "6 count (pack of 6)",
    "12 count (pack of 12)",
)
_FOOD_SIZES = (
    "4 ounce (pack of 1)",
    "8 ounce (pack of 2)",
    "12 ounce (pack of 1)",
    "16 ounce (pack of 3)",
    "2 pound (pack of 1)",
    "24 ounce (pack of 6)",
)
_FLAVORS = (
    "original",
    "vanilla",
    "chocolate",
    "sea salt",
    "honey",
    "peanut butter",
    "mixed berry",
    "cinnamon",
    "spicy",
    "lemon",
    "caramel",
    "mint",
)
_SCENTS = (
    "lavender",
    "coconut",
    "unscented",
    "citrus",
    "rose",
    "eucalyptus",
    "vanilla",
    "fresh linen",
    "tea tree",
    "sandalwood",
)
_FL_OZ = (
    "2 fl oz (pack of 1)",
    "8 fl oz (pack of 1)",
    "16 fl oz (pack of 1)",
    "16 fl oz (pack of 2)",
    "33.8 fl oz (pack of 1)",
)
_WOOD = ("walnut", "oak", "white", "black", "espresso", "natural", "grey wash", "cherry")
_LENGTHS = ("3 ft", "6 ft", "10 ft", "15 ft", "25 ft")

_BEAUTY = "Beauty & Personal Care"
_GROCERY = "Grocery & Gourmet Food"
_FASHION = "Clothing, Shoes & Jewelry"
_HOME = "Home & Kitchen › Furniture"
_ELEC = "Electronics"

PRODUCT_TYPES: tuple[ProductType, ...] = (
    # ---- beauty --------------------------------------------------------------------------
    ProductType("beauty", "shampoo", f"{_BEAUTY} › Hair Care › Shampoo & Conditioner › Shampoos",
                ("Shampoo", "Hair Shampoo", "Moisturizing Shampoo"),
                ("sulfate free", "paraben free", "damaged hair", "dry hair", "natural ingredients",
                 "cruelty free", "hair growth", "argan oil", "color treated"),
                (("scent", _SCENTS), ("size", _FL_OZ)), (6, 38),
                ("gentle cleansing", "restores shine", "salon quality formula")),
    ProductType("beauty", "face moisturizer", f"{_BEAUTY} › Skin Care › Face › Creams & Moisturizers",
                ("Face Moisturizer", "Face Cream", "Daily Moisturizer"),
                ("sensitive skin", "dry skin", "hyaluronic acid", "oil free", "fragrance free",
                 "anti aging", "dermatologist tested", "non comedogenic", "vitamin c"),
                (("size", ("1.7 oz", "2.5 oz", "3.4 oz", "5 oz")),), (9, 65),
                ("absorbs quickly", "lightweight texture", "hydrates for 24 hours")),
    ProductType("beauty", "lipstick", f"{_BEAUTY} › Makeup › Lips › Lipstick",
                ("Lipstick", "Matte Lipstick", "Liquid Lipstick"),
                ("long lasting", "cruelty free", "highly pigmented", "waterproof", "vegan",
                 "easy apply", "moisturizing"),
                (("color", ("ruby red", "nude pink", "coral", "berry", "mauve", "plum", "wine",
                            "rose gold")),), (5, 29),
                ("smooth application", "rich color payoff", "comfortable wear")),
    ProductType("beauty", "nail polish", f"{_BEAUTY} › Foot, Hand & Nail Care › Nail Art & Polish",
                ("Nail Polish", "Gel Nail Polish", "Nail Lacquer"),
                ("quick dry", "long lasting", "non toxic", "high gloss", "easy apply",
                 "cruelty free", "chip resistant"),
                (("color", ("red", "pink", "navy blue", "black", "lilac", "gold glitter",
                            "mint", "coral")), ("size", ("0.5 fl oz", "2 pack", "6 pack"))),
                (4, 24), ("salon finish", "even coverage", "brush for precise application")),
    ProductType("beauty", "hair extensions", f"{_BEAUTY} › Hair Care › Hair Extensions, Wigs & Accessories › Extensions",
                ("Hair Extensions", "Clip in Hair Extensions", "Tape in Hair Extensions"),
                ("natural hair", "high quality", "easy use", "heat resistant", "natural looking",
                 "thick hair"),
                (("color", ("natural black", "dark brown", "light brown", "blonde", "auburn",
                            "ombre")), ("size", ("12 inch", "16 inch", "20 inch", "24 inch"))),
                (15, 120), ("blends with your own hair", "soft and tangle free", "reusable")),
    ProductType("beauty", "eyeshadow palette", f"{_BEAUTY} › Makeup › Eyes › Eyeshadow",
                ("Eyeshadow Palette", "Eye Shadow Palette", "Makeup Palette"),
                ("highly pigmented", "long lasting", "cruelty free", "easy blend", "shimmer",
                 "matte finish", "travel size"),
                (("color", ("neutral", "smoky", "sunset", "rose gold", "pastel", "bronze")),),
                (8, 45), ("blendable shades", "mirror included", "buildable color")),
    ProductType("beauty", "body wash", f"{_BEAUTY} › Personal Care › Bath & Bathing Accessories › Bath › Body Washes",
                ("Body Wash", "Shower Gel", "Moisturizing Body Wash"),
                ("natural ingredients", "sensitive skin", "paraben free", "dry skin",
                 "sulfate free", "essential oils", "dermatologist tested"),
                (("scent", _SCENTS), ("size", _FL_OZ)), (5, 30),
                ("rich lather", "rinses clean", "leaves skin soft")),
    ProductType("beauty", "makeup brushes", f"{_BEAUTY} › Tools & Accessories › Makeup Brushes & Tools › Brush Sets",
                ("Makeup Brush Set", "Makeup Brushes", "Foundation Brush Set"),
                ("synthetic hair", "cruelty free", "easy clean", "travel size", "high quality",
                 "soft bristles"),
                (("color", ("black", "rose gold", "pink", "white", "marble")),
                 ("size", ("5 piece", "10 piece", "14 piece"))), (7, 40),
                ("dense soft bristles", "includes storage pouch", "flawless blending")),
    ProductType("beauty", "perfume", f"{_BEAUTY} › Fragrance › Women's › Eau de Parfum",
                ("Eau de Parfum", "Perfume Spray", "Fragrance Mist"),
                ("long lasting", "travel size", "natural ingredients", "alcohol free",
                 "gift set", "cruelty free"),
                (("scent", ("floral", "vanilla", "citrus", "woody", "fresh", "oriental")),
                 ("size", ("1 fl oz", "1.7 fl oz", "3.4 fl oz"))), (18, 140),
                ("top notes of bergamot", "elegant bottle", "lasts all day")),
    ProductType("beauty", "toothpaste", f"{_BEAUTY} › Oral Care › Toothpaste",
                ("Toothpaste", "Whitening Toothpaste", "Fluoride Free Toothpaste"),
                ("fluoride free", "teeth whitening", "sensitive teeth", "natural ingredients",
                 "fresh breath", "sls free"),
                (("flavor", ("mint", "cinnamon", "spearmint", "charcoal", "strawberry")),
                 ("size", _PACKS[:4])), (3, 22), ("fights cavities", "fresh breath", "enamel safe")),
    # ---- grocery -------------------------------------------------------------------------
    ProductType("grocery", "coffee", f"{_GROCERY} › Beverages › Coffee, Tea & Cocoa › Coffee › Whole Coffee Beans",
                ("Coffee Beans", "Ground Coffee", "Whole Bean Coffee"),
                ("gluten free", "non gmo", "usda organic", "fair trade", "kosher certified",
                 "low acid", "dark roast"),
                (("flavor", ("original", "hazelnut", "french vanilla", "mocha", "caramel",
                             "colombian")), ("size", _FOOD_SIZES)), (7, 45),
                ("roasted in small batches", "rich bold flavor", "smooth finish")),
    ProductType("grocery", "green tea", f"{_GROCERY} › Beverages › Coffee, Tea & Cocoa › Tea › Green",
                ("Green Tea", "Green Tea Bags", "Loose Leaf Green Tea"),
                ("caffeine free", "usda organic", "non gmo", "gluten free", "sugar free",
                 "natural ingredients", "kosher certified"),
                (("flavor", ("jasmine", "lemon", "mint", "matcha", "ginger", "original")),
                 ("size", ("20 count (pack of 1)", "40 count (pack of 2)", "100 count (pack of 1)"))),
                (4, 28), ("hand picked leaves", "rich in antioxidants", "smooth taste")),
    ProductType("grocery", "protein bars", f"{_GROCERY} › Snack Foods › Bars › Protein Bars",
                ("Protein Bars", "Protein Bar", "Keto Protein Bars"),
                ("gluten free", "low carb", "high protein", "keto friendly", "non gmo",
                 "low sugar", "plant based", "dairy free"),
                (("flavor", _FLAVORS), ("size", _PACKS)), (10, 48),
                ("20 grams of protein", "great post workout snack", "chewy texture")),
    ProductType("grocery", "dark chocolate", f"{_GROCERY} › Candy & Chocolate › Chocolate › Chocolate Bars",
                ("Dark Chocolate Bar", "Dark Chocolate", "Chocolate Bars"),
                ("sugar free", "non gmo", "usda organic", "dairy free", "fair trade", "vegan",
                 "keto friendly"),
                (("flavor", ("sea salt", "almond", "orange", "mint", "raspberry", "original")),
                 ("size", _PACKS)), (4, 35), ("70% cacao", "rich and smooth", "ethically sourced")),
    ProductType("grocery", "beef jerky", f"{_GROCERY} › Meat & Seafood › Jerky & Dried Meats › Beef Jerky",
                ("Beef Jerky", "Jerky Snack", "Meat Sticks"),
                ("high protein", "gluten free", "low fat", "grass fed", "keto friendly",
                 "no preservatives"),
                (("flavor", ("original", "teriyaki", "peppered", "sweet & hot", "spicy")),
                 ("size", _FOOD_SIZES)), (6, 40), ("slow smoked", "tender strips", "bold flavor")),
    ProductType("grocery", "olive oil", f"{_GROCERY} › Pantry Staples › Cooking Oils › Olive Oil",
                ("Extra Virgin Olive Oil", "Olive Oil", "Cold Pressed Olive Oil"),
                ("non gmo", "usda organic", "cold pressed", "kosher certified", "gluten free",
                 "first cold"),
                (("size", ("16.9 fl oz", "25.3 fl oz", "33.8 fl oz", "68 fl oz")),), (8, 55),
                ("from a single estate", "peppery finish", "glass bottle")),
    ProductType("grocery", "granola", f"{_GROCERY} › Breakfast Foods › Cereals › Granola",
                ("Granola", "Granola Clusters", "Crunchy Granola"),
                ("gluten free", "non gmo", "low sugar", "high protein", "vegan", "whole grain",
                 "nut free"),
                (("flavor", ("honey", "cinnamon", "chocolate", "mixed berry", "maple pecan",
                             "coconut")), ("size", _FOOD_SIZES)), (4, 26),
                ("baked in small batches", "crunchy clusters", "great with yogurt")),
    ProductType("grocery", "hot sauce", f"{_GROCERY} › Condiments & Salad Dressings › Hot Sauce",
                ("Hot Sauce", "Pepper Sauce", "Chili Sauce"),
                ("gluten free", "sugar free", "non gmo", "low sodium", "vegan", "keto friendly"),
                (("flavor", ("habanero", "chipotle", "jalapeno", "ghost pepper", "garlic",
                             "original")), ("size", ("5 fl oz", "12 fl oz", "3 pack"))), (4, 25),
                ("small batch", "real peppers", "bold heat")),
    ProductType("grocery", "mixed nuts", f"{_GROCERY} › Snack Foods › Nuts & Seeds › Mixed Nuts",
                ("Mixed Nuts", "Roasted Nuts", "Nut Mix"),
                ("high protein", "gluten free", "non gmo", "low sodium", "kosher certified",
                 "keto friendly", "resealable bag"),
                (("flavor", ("sea salt", "honey roasted", "unsalted", "smoked", "spicy")),
                 ("size", _FOOD_SIZES)), (6, 38), ("dry roasted", "crunchy", "heart healthy")),
    ProductType("grocery", "gummy candy", f"{_GROCERY} › Candy & Chocolate › Gummy Candy",
                ("Gummy Candy", "Gummy Bears", "Sour Gummies"),
                ("gluten free", "fat free", "vegan", "sugar free", "individually wrapped",
                 "natural flavors"),
                (("flavor", ("mixed fruit", "sour", "cherry", "watermelon", "peach")),
                 ("size", _FOOD_SIZES)), (3, 24), ("chewy and fruity", "party favorite", "bright colors")),
    # ---- fashion -------------------------------------------------------------------------
    ProductType("fashion", "t-shirts", f"{_FASHION} › Men › Clothing › Shirts › T-Shirts",
                ("T-Shirt", "Crew Neck T-Shirt", "Cotton Tee Shirt"),
                ("machine wash", "cotton jersey", "short sleeve", "regular fit", "slim fit",
                 "moisture wicking", "classic fit"),
                (("color", _COLORS), ("size", _CLOTHING_SIZES)), (8, 32),
                ("soft breathable cotton", "tagless collar", "durable stitching")),
    ProductType("fashion", "running shoes", f"{_FASHION} › Women › Shoes › Athletic › Running",
                ("Running Shoes", "Walking Shoes", "Athletic Sneakers"),
                ("non slip", "rubber sole", "lightweight", "arch support", "memory foam",
                 "breathable mesh", "lace up"),
                (("color", _COLORS), ("size", _SHOE_SIZES)), (25, 110),
                ("cushioned midsole", "flexible outsole", "all day comfort")),
    ProductType("fashion", "jeans", f"{_FASHION} › Men › Clothing › Jeans",
                ("Jeans", "Straight Leg Jeans", "Denim Jeans"),
                ("machine wash", "button closure", "slim fit", "relaxed fit", "stretch fabric",
                 "classic fit"),
                (("color", ("dark wash", "light wash", "black", "medium indigo", "grey")),
                 ("size", ("30w x 30l", "32w x 30l", "32w x 32l", "34w x 32l", "36w x 34l"))),
                (20, 75), ("five pocket styling", "comfortable stretch", "durable denim")),
    ProductType("fashion", "hoodie", f"{_FASHION} › Women › Clothing › Fashion Hoodies & Sweatshirts",
                ("Hoodie", "Pullover Hoodie", "Zip Up Hoodie"),
                ("machine wash", "fleece lined", "long sleeve", "drawstring closure",
                 "relaxed fit", "kangaroo pocket"),
                (("color", _COLORS), ("size", _CLOTHING_SIZES)), (18, 60),
                ("cozy fleece", "ribbed cuffs", "roomy hood")),
    ProductType("fashion", "dress", f"{_FASHION} › Women › Clothing › Dresses › Casual",
                ("Maxi Dress", "Summer Dress", "Midi Dress"),
                ("machine wash", "short sleeve", "v neck", "high waist", "pocket design",
                 "elastic waist", "polyester spandex"),
                (("color", ("floral blue", "black", "wine red", "green", "leopard", "white",
                            "pink")), ("size", _CLOTHING_SIZES)), (20, 70),
                ("flowy silhouette", "soft fabric", "perfect for summer")),
    ProductType("fashion", "socks", f"{_FASHION} › Men › Clothing › Socks › Athletic Socks",
                ("Athletic Socks", "Crew Socks", "Ankle Socks"),
                ("moisture wicking", "cotton blend", "arch support", "machine wash",
                 "cushioned sole", "breathable"),
                (("color", ("white", "black", "grey", "assorted", "navy")),
                 ("size", ("6 pairs", "10 pairs", "12 pairs"))), (9, 30),
                ("reinforced heel and toe", "stays in place", "soft cotton")),
    ProductType("fashion", "leggings", f"{_FASHION} › Women › Clothing › Active › Leggings",
                ("Yoga Leggings", "High Waisted Leggings", "Workout Leggings"),
                ("high waist", "tummy control", "squat proof", "moisture wicking",
                 "four way stretch", "pocket design"),
                (("color", _COLORS), ("size", _CLOTHING_SIZES)), (12, 45),
                ("buttery soft fabric", "flattering fit", "hidden pocket")),
    ProductType("fashion", "baseball cap", f"{_FASHION} › Men › Accessories › Hats & Caps › Baseball Caps",
                ("Baseball Cap", "Dad Hat", "Trucker Hat"),
                ("adjustable strap", "cotton twill", "breathable", "one size", "sun protection"),
                (("color", _COLORS),), (8, 28), ("curved brim", "low profile", "washed cotton")),
    ProductType("fashion", "rain jacket", f"{_FASHION} › Women › Clothing › Coats, Jackets & Vests › Raincoats",
                ("Rain Jacket", "Waterproof Jacket", "Raincoat"),
                ("water resistant", "hooded", "lightweight", "zipper closure", "windproof",
                 "packable"),
                (("color", _COLORS), ("size", _CLOTHING_SIZES)), (25, 95),
                ("sealed seams", "adjustable hood", "breathable lining")),
    ProductType("fashion", "sandals", f"{_FASHION} › Women › Shoes › Sandals › Flat Sandals",
                ("Sandals", "Flat Sandals", "Slide Sandals"),
                ("non slip", "arch support", "rubber sole", "open toe", "memory foam",
                 "adjustable strap"),
                (("color", ("black", "brown", "white", "tan", "gold", "silver")),
                 ("size", _SHOE_SIZES)), (15, 60), ("cushioned footbed", "easy on and off", "durable sole")),
    # ---- garden (furniture) --------------------------------------------------------------
    ProductType("garden", "office chair", f"{_HOME} › Home Office Furniture › Home Office Chairs › Desk Chairs",
                ("Office Chair", "Desk Chair", "Ergonomic Chair"),
                ("lumbar support", "height adjustable", "easy assemble", "mesh back",
                 "heavy duty", "swivel base", "living room"),
                (("color", ("black", "grey", "white", "blue", "pink")),), (60, 290),
                ("supports up to 300 lbs", "smooth rolling casters", "breathable backrest")),
    ProductType("garden", "coffee table", f"{_HOME} › Living Room Furniture › Tables › Coffee Tables",
                ("Coffee Table", "Cocktail Table", "Lift Top Coffee Table"),
                ("living room", "storage space", "easy assemble", "solid wood", "metal legs",
                 "engineered wood", "mid century"),
                (("color", _WOOD),), (45, 320), ("spacious tabletop", "sturdy frame", "modern design")),
    ProductType("garden", "bookshelf", f"{_HOME} › Home Office Furniture › Bookcases",
                ("Bookshelf", "Bookcase", "Ladder Shelf"),
                ("storage space", "easy assemble", "engineered wood", "living room",
                 "space saving", "metal frame"),
                (("color", _WOOD), ("size", ("3 tier", "4 tier", "5 tier"))), (35, 210),
                ("open shelving", "anti tip hardware", "industrial style")),
    ProductType("garden", "bar stool", f"{_HOME} › Kitchen & Dining Room Furniture › Bar Stools",
                ("Bar Stools", "Counter Height Stools", "Swivel Bar Stool"),
                ("height adjustable", "easy assemble", "dining room", "footrest",
                 "faux leather", "swivel seat"),
                (("color", ("black", "white", "grey", "brown", "green")),
                 ("size", ("set of 2", "set of 4"))), (50, 260),
                ("padded seat", "chrome base", "non marking feet")),
    ProductType("garden", "area rug", f"{_HOME} › Home Décor Products › Area Rugs, Runners & Pads › Area Rugs",
                ("Area Rug", "Shag Rug", "Washable Rug"),
                ("living room", "non slip", "machine washable", "easy clean", "stain resistant",
                 "pet friendly"),
                (("color", ("grey", "beige", "navy blue", "multicolor", "ivory", "green")),
                 ("size", ("2' x 3'", "4' x 6'", "5' x 7'", "8' x 10'"))), (25, 240),
                ("soft underfoot", "low pile", "vibrant colors")),
    ProductType("garden", "floor lamp", f"{_HOME} › Lighting › Floor Lamps",
                ("Floor Lamp", "Standing Lamp", "Arc Floor Lamp"),
                ("living room", "energy efficient", "easy assemble", "dimmable", "bedroom",
                 "led light"),
                (("color", ("black", "brass", "white", "silver", "bronze")),), (30, 180),
                ("adjustable head", "foot switch", "warm light")),
    ProductType("garden", "patio chair", "Patio, Lawn & Garden › Patio Furniture & Accessories › Patio Seating › Chairs",
                ("Patio Chairs", "Outdoor Chairs", "Adirondack Chair"),
                ("weather resistant", "easy assemble", "heavy duty", "outdoor furniture",
                 "uv protection", "stackable"),
                (("color", ("brown", "black", "white", "grey", "teal")),
                 ("size", ("set of 2", "set of 4"))), (60, 300),
                ("rust resistant frame", "ergonomic seat", "built for outdoor use")),
    ProductType("garden", "nightstand", f"{_HOME} › Bedroom Furniture › Nightstands",
                ("Nightstand", "Bedside Table", "End Table with Drawer"),
                ("storage space", "easy assemble", "bedroom", "solid wood", "charging station",
                 "engineered wood"),
                (("color", _WOOD), ("size", ("set of 1", "set of 2"))), (30, 190),
                ("smooth gliding drawer", "compact design", "open shelf")),
    ProductType("garden", "tv stand", f"{_HOME} › Living Room Furniture › TV & Media Furniture › Television Stands & Entertainment Centers",
                ("TV Stand", "Entertainment Center", "Media Console"),
                ("living room", "storage space", "easy assemble", "cable management",
                 "engineered wood", "heavy duty"),
                (("color", _WOOD), ("size", ("55 inch", "65 inch", "75 inch"))), (70, 320),
                ("holds tvs up to 65 inches", "adjustable shelves", "sliding doors")),
    ProductType("garden", "throw pillow covers", f"{_HOME} › Home Décor Products › Decorative Pillows, Inserts & Covers › Throw Pillow Covers",
                ("Throw Pillow Covers", "Pillow Cases", "Cushion Covers"),
                ("living room", "machine washable", "hidden zipper", "super soft", "faux linen",
                 "set of 4"),
                (("color", _COLORS), ("size", ("16 x 16 inch", "18 x 18 inch", "20 x 20 inch"))),
                (9, 35), ("invisible zipper", "double sided print", "fade resistant")),
    # ---- electronics ---------------------------------------------------------------------
    ProductType("electronics", "wireless earbuds", f"{_ELEC} › Headphones, Earbuds & Accessories › Earbud Headphones",
                ("Wireless Earbuds", "Bluetooth Earbuds", "True Wireless Headphones"),
                ("noise cancelling", "wireless bluetooth", "long battery life", "water resistant",
                 "fast charging", "hands free", "stereo sound"),
                (("color", ("black", "white", "navy blue", "pink", "green")),), (18, 150),
                ("30 hour playtime with case", "touch controls", "deep bass")),
    ProductType("electronics", "phone case", f"{_ELEC} › Cell Phones & Accessories › Cases, Holsters & Sleeves › Basic Cases",
                ("Phone Case", "Protective Phone Case", "Slim Phone Cover"),
                ("shock absorbing", "wireless charging", "drop protection", "slim fit",
                 "scratch resistant", "easy install"),
                (("color", ("clear", "black", "navy blue", "pink", "purple", "green")),
                 ("style", ("iphone 13", "iphone 14", "iphone 15", "galaxy s23", "pixel 8"))),
                (7, 30), ("raised edges protect the camera", "precise cutouts", "grippy sides")),
    ProductType("electronics", "usb c cable", f"{_ELEC} › Computers & Accessories › Computer Accessories & Peripherals › Cables & Interconnects › USB Cables",
                ("USB C Cable", "Charging Cable", "Fast Charging Cord"),
                ("fast charging", "high speed", "nylon braided", "durable", "data transfer",
                 "usb c"),
                (("color", ("black", "white", "grey", "red")), ("size", _LENGTHS)), (6, 22),
                ("supports 60w charging", "480 mbps data transfer", "10000 bend lifespan")),
    ProductType("electronics", "bluetooth speaker", f"{_ELEC} › Portable Audio & Video › Portable Speakers & Docks › Portable Bluetooth Speakers",
                ("Bluetooth Speaker", "Portable Speaker", "Wireless Speaker"),
                ("wireless bluetooth", "waterproof", "long battery life", "stereo sound",
                 "easy carry", "high power", "hands free"),
                (("color", ("black", "blue", "red", "grey", "camo")),), (20, 160),
                ("360 degree sound", "built in microphone", "pairs two speakers")),
    ProductType("electronics", "hdmi cable", f"{_ELEC} › Television & Video › Accessories › Cables › HDMI Cables",
                ("HDMI Cable", "High Speed HDMI Cable", "4K HDMI Cord"),
                ("high speed", "gold plated", "ultra hd", "plug play", "nylon braided",
                 "high definition"),
                (("size", _LENGTHS),), (6, 28), ("supports 4k at 60hz", "ethernet channel", "audio return channel")),
    ProductType("electronics", "power bank", f"{_ELEC} › Cell Phones & Accessories › Chargers & Power Adapters › Portable Power Banks",
                ("Power Bank", "Portable Charger", "Battery Pack"),
                ("fast charging", "high capacity", "usb c", "easy carry", "led display",
                 "wireless charging"),
                (("color", ("black", "white", "blue", "pink")),
                 ("size", ("10000mah", "20000mah", "26800mah"))), (15, 70),
                ("charges two devices at once", "compact design", "overcharge protection")),
    ProductType("electronics", "wireless mouse", f"{_ELEC} › Computers & Accessories › Computer Accessories & Peripherals › Keyboards, Mice & Accessories › Mice",
                ("Wireless Mouse", "Ergonomic Mouse", "Bluetooth Mouse"),
                ("wireless bluetooth", "ergonomic design", "long battery life", "silent click",
                 "plug play", "usb receiver"),
                (("color", ("black", "white", "grey", "pink", "blue")),), (9, 60),
                ("adjustable dpi", "comfortable grip", "works on most surfaces")),
    ProductType("electronics", "mechanical keyboard", f"{_ELEC} › Computers & Accessories › Computer Accessories & Peripherals › Keyboards, Mice & Accessories › Keyboards",
                ("Mechanical Keyboard", "Gaming Keyboard", "Compact Keyboard"),
                ("rgb backlit", "hot swappable", "wireless bluetooth", "usb c", "anti ghosting",
                 "compact design"),
                (("color", ("black", "white", "grey", "pink")),
                 ("style", ("red switch", "blue switch", "brown switch"))), (35, 160),
                ("aluminum top plate", "programmable keys", "detachable cable")),
    ProductType("electronics", "screen protector", f"{_ELEC} › Cell Phones & Accessories › Accessories › Screen Protectors",
                ("Screen Protector", "Tempered Glass Screen Protector", "Privacy Screen Protector"),
                ("tempered glass", "easy install", "case friendly", "bubble free",
                 "high definition", "scratch resistant"),
                (("style", ("iphone 13", "iphone 14", "iphone 15", "galaxy s23", "pixel 8")),
                 ("size", ("2 pack", "3 pack"))), (6, 20), ("9h hardness", "installation frame included", "touch sensitive")),
    ProductType("electronics", "security camera", f"{_ELEC} › Camera & Photo › Video Surveillance › Surveillance Cameras › Dome Cameras",
                ("Security Camera", "Indoor Camera", "Outdoor Security Camera"),
                ("night vision", "motion detection", "two way audio", "easy install",
                 "wireless bluetooth", "high definition", "weather resistant"),
                (("size", ("1 camera", "2 cameras", "4 cameras")),), (25, 200),
                ("1080p live view", "cloud and local storage", "works with alexa")),
)  # fmt: skip

_BRAND_START = (
    "Lum",
    "Ver",
    "Nor",
    "Cal",
    "Zen",
    "Ori",
    "Bel",
    "Mar",
    "Sol",
    "Aur",
    "Kin",
    "Tal",
    "Ris",
    "Fen",
    "Gal",
    "Hal",
    "Jun",
    "Lov",
    "Mer",
    "Pax",
    "Quin",
    "Sav",
)
_BRAND_END = (
    "ora",
    "ex",
    "ia",
    "ova",
    "ix",
    "ent",
    "ana",
    "ico",
    "une",
    "aro",
    "isa",
    "el",
    "ton",
    "wick",
    "ly",
    "ara",
)
_TITLE_EXTRAS = (
    "Premium",
    "Classic",
    "Essential",
    "Everyday",
    "Professional",
    "Deluxe",
    "Ultra",
    "Original",
    "Signature",
    "Pro",
)
_REVIEW_TITLES = (
    "Exactly what I needed",
    "Great value",
    "Love it",
    "Good but not perfect",
    "Works as described",
    "Would buy again",
    "Not bad",
    "Five stars",
    "Disappointed",
    "Better than expected",
)
_REVIEW_BODIES = (
    "The {attr} part is real, I noticed it right away. {detail}.",
    "Bought this for my {who} and they use it every day. {detail}.",
    "I compared several {query} and this one is {attr}. Shipping was quick.",
    "Quality is fine for the price. {detail}, although the packaging was dented.",
    "It is {attr} as promised. I ordered the {option} one and it matches the photos.",
)
_WHO = ("wife", "husband", "son", "daughter", "mom", "dad", "roommate", "office")


_ASIN_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ0123456789"


def _asin(rng: random.Random, used: set[str]) -> str:
    """A fresh 10-character ASIN-like id: ``B0`` and eight base-34 digits."""
    while True:
        number = rng.getrandbits(41) % (34**8)
        digits = []
        for _ in range(8):
            number, digit = divmod(number, 34)
            digits.append(_ASIN_ALPHABET[digit])
        asin = "B0" + "".join(digits)
        if asin not in used:
            used.add(asin)
            return asin


@functools.lru_cache(maxsize=8192)
def _title_case(text: str) -> str:
    return " ".join(
        w if any(c.isdigit() for c in w) else w[:1].upper() + w[1:] for w in text.split()
    )


def _product(
    kind: ProductType, rng: random.Random, used: set[str], index: int
) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]], float]:
    """One product record (official schema), its attribute entry, reviews and rating."""
    asin = _asin(rng, used)
    brand = rng.choice(_BRAND_START) + rng.choice(_BRAND_END)
    attributes = rng.sample(kind.attributes, rng.randint(2, min(5, len(kind.attributes))))
    noun = rng.choice(kind.nouns)
    lead, rest = attributes[0], attributes[1:]
    extra = rng.choice(_TITLE_EXTRAS)
    title = f"{brand} {extra} {_title_case(lead)} {noun}"
    if rest:
        title += f", {_title_case(rest[0])}"
    detail = rng.choice(kind.details)
    title += f" - {_title_case(detail)}"

    groups = {}
    n_groups = rng.randint(1, len(kind.options)) if kind.options else 0
    for name, pool in kind.options[:n_groups]:
        groups[name] = rng.sample(pool, rng.randint(2, min(6, len(pool))))
    customization = {
        name.capitalize(): [
            {"value": v, "image": f"https://images.example.invalid/{asin}/{name}-{i}.jpg"}
            for i, v in enumerate(values)
        ]
        for name, values in groups.items()
    }

    low, high = kind.price
    price = (
        round(rng.uniform(low, high), 2) - 0.01 if high > 10 else round(rng.uniform(low, high), 2)
    )
    price = round(max(price, 0.99), 2)
    if "size" in groups and rng.random() < 0.2:
        pricing = f"${price:.2f} - ${price * rng.uniform(1.2, 1.8):.2f}"
    else:
        pricing = f"${price:.2f}"

    bullets = [
        f"{_title_case(a)}: {brand} {noun.lower()} is {a}, {rng.choice(kind.details)}."
        for a in attributes
    ]
    bullets.append(f"What you get: {noun.lower()} by {brand}, backed by a 30 day return policy.")
    rng.shuffle(bullets)
    description = (
        f"{brand} {noun.lower()} is made for people who want {', '.join(attributes[:-1]) or lead}"
        f"{' and ' + attributes[-1] if len(attributes) > 1 else ''}. {detail.capitalize()}, "
        f"{rng.choice(kind.details)}. "
        + (
            f"Available in {len(next(iter(groups.values())))} {next(iter(groups))} options. "
            if groups
            else ""
        )
        + f"A great choice of {kind.query} for everyday use."
    )
    reviews = []
    for _ in range(rng.randint(0, 4)):
        option_value = rng.choice(next(iter(groups.values()))) if groups else "standard"
        body = rng.choice(_REVIEW_BODIES).format(
            attr=rng.choice(attributes),
            detail=rng.choice(kind.details).capitalize(),
            who=rng.choice(_WHO),
            query=kind.query,
            option=option_value,
        )
        reviews.append(
            {
                "title": rng.choice(_REVIEW_TITLES),
                "stars": rng.choice((5, 5, 4, 4, 3, 2, 1)),
                "review": body,
            }
        )
    rating = round(sum(r["stars"] for r in reviews) / len(reviews), 1) if reviews else "N.A."
    record = {
        "name": title,
        "product_information": {"ASIN": asin, "Manufacturer": brand},
        "brand": f"Brand: {brand}",
        "brand_url": "",
        "full_description": description,
        "pricing": pricing,
        "list_price": "",
        "availability_quantity": rng.randint(1, 40),
        "availability_status": "In Stock.",
        "images": [f"https://images.example.invalid/{asin}/main.jpg"],
        "product_category": kind.path,
        "average_rating": rating if reviews else "",
        "small_description": bullets,
        "total_reviews": str(len(reviews)) if reviews else "",
        "total_answered_questions": "",
        "customization_options": customization or "",
        "seller_id": "",
        "seller_name": f"{brand} Official",
        "fulfilled_by_amazon": "",
        "fast_track_message": "",
        "aplus_present": "",
        "asin": asin,
        "category": kind.category,
        "query": kind.query,
        "page": 1 + index // 20,
        "small_description_old": "About this item " + " ".join(bullets),
    }
    return record, {"attributes": attributes, "groups": groups}, reviews, rating


_INSTRUCTIONS = (
    "i am looking for {attrs} {query}{opts}",
    "i need {query} that {be} {attrs}{opts}",
    "i want to buy {attrs} {query}{opts}",
    "looking for {query} that {be} {attrs}{opts}",
    "i would like {attrs} {query}{opts}",
    "find me {attrs} {query}{opts}",
)


def _join(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _option_phrase(name: str, value: str, rng: random.Random) -> str:
    if name == "color":
        return rng.choice((f"in {value}", f"in {value} color", f"the {value} one"))
    if name == "size":
        return rng.choice((f"in size {value}", f"in {value}", f"the {value} size"))
    return rng.choice((f"with {name} {value}", f"in {value} {name}", f"the {value} {name}"))


def _instruction(
    record: dict[str, Any], meta: dict[str, Any], rng: random.Random
) -> dict[str, Any]:
    attributes = meta["attributes"]
    chosen = rng.sample(attributes, rng.randint(1, min(3, len(attributes))))
    options = []
    phrases = []
    for name, values in meta["groups"].items():
        if rng.random() < 0.85:
            value = rng.choice(values)
            options.append((name, value))
            phrases.append(_option_phrase(name, value, rng))
    opts = ""
    if phrases:
        opts = rng.choice((", ", " ", ". pick ", ", and ")) + _join(phrases)
    text = rng.choice(_INSTRUCTIONS).format(
        attrs=_join(chosen),
        query=record["query"],
        opts=opts,
        be="are" if record["query"].endswith("s") else "is",
    )
    return {
        "asin": record["asin"],
        "instruction": text,
        "attributes": list(attributes),
        "options": [f"{n}: {v}" for n, v in options] or [""],
        "instruction_attributes": chosen,
        "instruction_options": [v for _, v in options],
        "assignment_id": f"GEN{rng.getrandbits(48):012X}",
        "worker_id": "GENERATED",
    }


def generate_catalog(
    num_products: int = DEFAULT_NUM_PRODUCTS,
    seed: int = CATALOG_VERSION,
    with_instructions: bool = True,
) -> tuple[
    list[dict[str, Any]], dict[str, Any], dict[str, list[dict[str, Any]]], list[dict[str, Any]]
]:
    """Products, attribute file, human instruction file and reviews, in the official schemas.

    Product types take turns so every category is equally represented; the product list is
    then shuffled (the official ``items_shuffle`` is shuffled too).
    """
    rng = random.Random(seed)
    used: set[str] = set()
    products, attributes, human, reviews = [], {}, {}, []
    for index in range(num_products):
        kind = PRODUCT_TYPES[index % len(PRODUCT_TYPES)]
        record, meta, product_reviews, rating = _product(kind, rng, used, index)
        asin = record["asin"]
        products.append(record)
        chosen = rng.sample(meta["attributes"], min(3, len(meta["attributes"])))
        attributes[asin] = {
            "attributes": meta["attributes"],
            "instruction": f"Find me {', '.join(chosen)} {kind.query}",
            "instruction_attributes": chosen,
        }
        if product_reviews:
            reviews.append({"asin": asin, "reviews": product_reviews, "average_rating": rating})
        if with_instructions:
            count = rng.choice(INSTRUCTIONS_PER_PRODUCT)
            human[asin] = [_instruction(record, meta, rng) for _ in range(count)]
    rng.shuffle(products)
    return products, attributes, human, reviews


def generated_data_dir(num_products: int = DEFAULT_NUM_PRODUCTS) -> Path:
    """The cached folder holding the generated catalog's files (written on first use)."""
    folder = cache_dir("webshop", f"catalog-v{CATALOG_VERSION}", f"n{num_products}")
    marker = folder / "COMPLETE"
    if marker.is_file():
        return folder
    logger.info("generating the WebShop catalog (%d products) in %s", num_products, folder)
    products, attributes, human, reviews = generate_catalog(num_products)
    atomic_write_text(folder / "items_shuffle_1000.json", json.dumps(products))
    atomic_write_text(folder / "items_ins_v2_1000.json", json.dumps(attributes))
    atomic_write_text(folder / "items_human_ins.json", json.dumps(human))
    atomic_write_text(folder / "reviews.json", json.dumps(reviews))
    atomic_write_text(marker, json.dumps({"version": CATALOG_VERSION, "products": num_products}))
    return folder
